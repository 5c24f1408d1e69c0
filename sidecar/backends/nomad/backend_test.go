package nomad

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/poll"
	"github.com/hetgpu/hetgpu/model/annot"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
)

func ptr[T any](v T) *T { return &v }

// heldJob is a single-group job waiting for hetgpu.
func heldJob(id string, gpus uint64, count int, meta map[string]string) *api.Job {
	return nomadtest.HeldJob(id, gpus, count, meta)
}

type fixture struct {
	srv *nomadtest.Server
	b   *Backend
	now time.Time
}

func newFixture(t testing.TB, mod func(*Config)) *fixture {
	t.Helper()
	srv := nomadtest.New()
	t.Cleanup(srv.Close)
	srv.AddNode("node-t4-0000", "t4", "Tesla T4", 4)
	srv.AddNode("node-v100-00", "v100", "Tesla V100-SXM2-16GB", 8)
	srv.AddNode("node-a100-00", "a100", "NVIDIA A100-SXM4-40GB", 8)
	f := &fixture{srv: srv}
	cfg := Config{Client: srv.Client(), ExplainBaseURL: "http://sidecar:4656", Topology: true, RetryBackoff: 10 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.b = b
	return f
}

func (f *fixture) resync(t *testing.T) {
	t.Helper()
	if err := f.b.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// finishedRun runs maintenance and returns the one finished run it reports; none or more
// fail the test.
func (f *fixture) finishedRun(t *testing.T) cluster.FinishedRun {
	t.Helper()
	m, _ := f.b.Maintain(context.Background())
	if len(m.Finished) != 1 {
		t.Fatalf("finished = %+v, want one run", m.Finished)
	}
	return m.Finished[0]
}

func (f *fixture) snapshot(t *testing.T) *cluster.Snapshot {
	t.Helper()
	s, err := f.b.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// decide pins a pending job to the first free GPUs of a node, as a placer would.
// pin pins job on nodeID as decide chooses; a pin not applied fails the test.
func (f *fixture) pin(t *testing.T, snap *cluster.Snapshot, job cluster.Job, nodeID string) {
	t.Helper()
	res, err := f.b.Pin(context.Background(), []cluster.Decision{decide(snap, job, nodeID)})
	if err != nil || len(res) != 1 || !res[0].Applied {
		t.Fatalf("pin %s on %s = %+v, %v", job.ID, nodeID, res, err)
	}
}

func decide(snap *cluster.Snapshot, job cluster.Job, nodeID string) cluster.Decision {
	used := map[string]bool{}
	for _, a := range snap.Running {
		for _, d := range a.DeviceIDs {
			used[d] = true
		}
	}
	d := cluster.Decision{Namespace: job.Namespace, JobID: job.ID, Group: job.Group, Score: 0.9, Rank: 1, PredThroughput: 800, PredPowerW: 500}
	for _, n := range snap.Nodes {
		if n.ID != nodeID {
			continue
		}
		g := n.Devices[0]
		a := cluster.Assignment{NodeID: n.ID, DeviceGroup: g.ID()}
		for _, in := range g.Instances {
			if len(a.InstanceIDs) < job.GPUs && !used[in.ID] && in.Healthy {
				a.InstanceIDs = append(a.InstanceIDs, in.ID)
			}
		}
		d.Assign = append(d.Assign, a)
		d.GPUType = g.GPUType
	}
	return d
}

func TestSnapshotPinPlace(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.SetTopology("GPU-a100-0", map[string]*api.StatValue{"nvlink_peers": {StringVal: ptr("GPU-a100-1,GPU-a100-2")}, "numa_node": {IntNumeratorVal: ptr(int64(1))}})
	f.srv.Register(heldJob("resnet", 2, 1, nil))
	f.resync(t)
	snap := f.snapshot(t)
	if len(snap.Nodes) != 3 || len(snap.Pending) != 1 || len(snap.Running) != 0 {
		t.Fatalf("snapshot: %d nodes, %d pending, %d running", len(snap.Nodes), len(snap.Pending), len(snap.Running))
	}
	j := snap.Pending[0]
	if j.Key() != "default/resnet/train" || j.GPUs != 2 || j.DeviceName != "nvidia/gpu" || j.JobModifyIndex == 0 ||
		j.Hetgpu.ModelName != "ResNet-50" || j.Hetgpu.BatchSize != 64 || j.MaxNodes() != 1 {
		t.Errorf("pending job = %+v", j)
	}
	for _, c := range j.Constraints {
		if strings.Contains(c.LTarget, "hetgpu.queue") {
			t.Errorf("hold constraint leaked into the job's constraints: %v", c)
		}
	}
	var a100 cluster.Node
	for _, n := range snap.Nodes {
		if n.Name == "a100" {
			a100 = n
		}
	}
	g := a100.Devices[0]
	if g.GPUType != "a100" || len(g.Instances) != 8 || g.Attributes["memory"].Int == nil || *g.Attributes["memory"].Int != 16384 {
		t.Errorf("a100 device group = %+v", g)
	}
	if in := g.Instances[0]; len(in.NVLinkPeers) != 2 || in.NUMANode != 1 || a100.Interconnect != "nvlink" {
		t.Errorf("topology from device stats not read: %+v interconnect %q", in, a100.Interconnect)
	}

	d := decide(snap, j, "node-a100-00")
	res, err := f.b.Pin(context.Background(), []cluster.Decision{d})
	if err != nil || len(res) != 1 || !res[0].Applied {
		t.Fatalf("pin = %+v, %v", res, err)
	}
	job := f.srv.Job("default", "resnet")
	tg := job.TaskGroups[0]
	if groupHeld(job, tg) {
		t.Error("job still held after the pin")
	}
	nodes, devs, ok := PinOf(tg)
	if !ok || nodes[0] != "node-a100-00" || strings.Join(devs, ",") != "GPU-a100-0,GPU-a100-1" {
		t.Errorf("pin in Nomad = %v %v", nodes, devs)
	}
	if !strings.Contains(job.UI.Description, "**a100**") || !strings.Contains(job.UI.Description, "predicted 800 steps/s") ||
		job.UI.Links[0].URL != "http://sidecar:4656/v1/jobs/default/resnet/explain?format=html" {
		t.Errorf("ui = %q %+v", job.UI.Description, job.UI.Links)
	}
	if job.Meta["hetgpu.model"] != "resnet/ResNet-50" || len(job.Meta) != 3 {
		t.Errorf("meta changed: %v", job.Meta)
	}
	tags := f.srv.Tags("default", "resnet")
	if len(tags) != 1 || tags[0].Version != *job.Version || !strings.HasPrefix(tags[0].Name, "hetgpu-pin-") {
		t.Errorf("tags = %+v (job version %d)", tags, *job.Version)
	}
	// Nomad placed it exactly there.
	allocs := f.srv.Allocs("default", "resnet")
	if len(allocs) != 1 || allocs[0].NodeID != "node-a100-00" {
		t.Fatalf("allocs = %+v", allocs)
	}
	got := allocs[0].AllocatedResources.Tasks["train"].Devices[0].DeviceIDs
	sort.Strings(got)
	if strings.Join(got, ",") != "GPU-a100-0,GPU-a100-1" {
		t.Errorf("Nomad assigned %v, pinned %v", got, devs)
	}
	// Before any event arrives, the next snapshot already counts the pinned GPUs as taken.
	snap = f.snapshot(t)
	if len(snap.Pending) != 0 {
		t.Errorf("pinned job still pending: %+v", snap.Pending)
	}
	taken := map[string]bool{}
	for _, a := range snap.Running {
		for _, id := range a.DeviceIDs {
			taken[id] = true
		}
	}
	if !taken["GPU-a100-0"] || !taken["GPU-a100-1"] {
		t.Errorf("pinned GPUs free in the next snapshot: %+v", snap.Running)
	}
}

func TestPinConflictThenRetry(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.Register(heldJob("bert", 1, 1, nil))
	f.resync(t)
	snap := f.snapshot(t)
	d := decide(snap, snap.Pending[0], "node-v100-00")
	// The user re-runs the job between snapshot and pin.
	f.srv.Register(heldJob("bert", 2, 1, nil))
	res, err := f.b.Pin(context.Background(), []cluster.Decision{d})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Applied || !res[0].Conflict {
		t.Fatalf("pin on a changed job = %+v, want a conflict", res)
	}
	if _, _, ok := PinOf(f.srv.Job("default", "bert").TaskGroups[0]); ok {
		t.Fatal("conflicting pin was written")
	}
	// Next round: re-read, decide again, pin.
	f.resync(t)
	snap = f.snapshot(t)
	if snap.Pending[0].GPUs != 2 {
		t.Fatalf("re-read job asks %d GPUs", snap.Pending[0].GPUs)
	}
	res, _ = f.b.Pin(context.Background(), []cluster.Decision{decide(snap, snap.Pending[0], "node-v100-00")})
	if !res[0].Applied {
		t.Fatalf("second pin = %+v", res)
	}
}

func TestPinRaceDetectedByEnforceIndex(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.Register(heldJob("race", 1, 1, nil))
	f.resync(t)
	snap := f.snapshot(t)
	var once atomic.Bool
	// The job changes after our read but before our register: EnforceIndex must catch it.
	f.srv.RegisterHook = func(job *api.Job) error {
		if once.CompareAndSwap(false, true) {
			go f.srv.Register(heldJob("race", 1, 1, map[string]string{"hetgpu.enable": "true", "hetgpu.batch_size": "8"}))
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	}
	res, _ := f.b.Pin(context.Background(), []cluster.Decision{decide(snap, snap.Pending[0], "node-t4-0000")})
	if res[0].Applied || !res[0].Conflict {
		t.Fatalf("pin racing a user update = %+v, want a conflict", res)
	}
	if f.srv.Job("default", "race").Meta["hetgpu.batch_size"] != "8" {
		t.Error("the user's update was overwritten")
	}
}

func TestPinDeregisteredJobDropped(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.Register(heldJob("gone", 1, 1, nil))
	f.resync(t)
	snap := f.snapshot(t)
	f.srv.Deregister("default", "gone")
	res, err := f.b.Pin(context.Background(), []cluster.Decision{decide(snap, snap.Pending[0], "node-t4-0000")})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Applied || res[0].Conflict || !errors.Is(res[0].Err, cluster.ErrJobGone) {
		t.Fatalf("pin of a deregistered job = %+v", res)
	}
	m, _ := f.b.Maintain(context.Background())
	if len(m.Gone) != 1 || m.Gone[0] != "default/gone/train" {
		t.Errorf("gone = %v", m.Gone)
	}
	if len(f.snapshot(t).Pending) != 0 {
		t.Error("deregistered job still pending")
	}
}

func TestMultiNodePin(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.AddNode("node-a100-01", "a100b", "NVIDIA A100-SXM4-40GB", 8)
	f.srv.Register(heldJob("ddp", 4, 2, nil))
	f.resync(t)
	snap := f.snapshot(t)
	j := snap.Pending[0]
	if j.GPUs != 8 || j.GPUsPerNode != 4 || j.MaxNodes() != 2 {
		t.Fatalf("data-parallel job = GPUs %d per node %d max nodes %d", j.GPUs, j.GPUsPerNode, j.MaxNodes())
	}
	j.GPUs = 4
	d := decide(snap, j, "node-a100-00")
	d2 := decide(snap, j, "node-a100-01")
	d.Assign = append(d.Assign, d2.Assign...)
	res, _ := f.b.Pin(context.Background(), []cluster.Decision{d})
	if !res[0].Applied {
		t.Fatalf("pin = %+v", res)
	}
	tg := f.srv.Job("default", "ddp").TaskGroups[0]
	var nodeC *api.Constraint
	for _, c := range tg.Constraints {
		if c.LTarget == NodeTarget {
			nodeC = c
		}
	}
	if nodeC == nil || nodeC.Operand != api.ConstraintSetContainsAny || nodeC.RTarget != "node-a100-00,node-a100-01" {
		t.Errorf("node constraint = %+v", nodeC)
	}
	allocs := f.srv.Allocs("default", "ddp")
	if len(allocs) != 2 || allocs[0].NodeID == allocs[1].NodeID {
		t.Errorf("allocations %+v, want one per pinned node", allocs)
	}

	// One of the two nodes goes down: its allocation is lost and Nomad cannot place the
	// replacement on the pin, so the group is re-held as a whole.
	f.resync(t)
	if m, _ := f.b.Maintain(context.Background()); len(m.Reheld) != 0 {
		t.Fatalf("healthy multi-node pin re-held: %+v", m.Reheld)
	}
	f.srv.UpdateNode("node-a100-01", "NodeStreamEvent", func(n *api.Node) { n.Status = api.NodeStatusDown })
	f.resync(t)
	m, _ := f.b.Maintain(context.Background())
	if len(m.Reheld) != 1 || !m.Reheld[0].Applied || !strings.Contains(m.Reheld[0].Reason, "a100b is down") {
		t.Fatalf("re-held = %+v", m.Reheld)
	}
	live := 0
	for _, a := range f.srv.Allocs("default", "ddp") {
		if a.DesiredStatus == "run" && a.ClientStatus == "running" {
			live++
		}
	}
	if live != 0 {
		t.Errorf("%d allocations still run after the group was re-held (the new device pin is destructive)", live)
	}
}

// watchedFixture is a fixture without periodic resyncs whose backend watches the fake until
// stop, which returns Watch's answer; it returns once the first resync is done.
func watchedFixture(t *testing.T) (f *fixture, stop func() error) {
	t.Helper()
	f = newFixture(t, func(c *Config) { c.ResyncEvery = -1 })
	ctx, cancel := context.WithCancel(context.Background())
	var changes atomic.Int64
	done := make(chan error, 1)
	go func() { done <- f.b.Watch(ctx, func() { changes.Add(1) }) }()
	var err error
	stopped := false
	stop = func() error { // called by the test and by its cleanup, one after the other
		if !stopped {
			stopped = true
			cancel()
			err = <-done
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	poll.Until(t, "first resync", func() bool { return changes.Load() > 0 })
	return f, stop
}

func TestEventStreamResume(t *testing.T) {
	f, stop := watchedFixture(t)

	f.srv.Register(heldJob("first", 1, 1, nil))
	poll.Until(t, "job from the stream", func() bool { return len(f.snapshot(t).Pending) == 1 })
	last := f.b.Index()
	if last < f.srv.Index()-1 {
		t.Fatalf("backend index %d lags the server %d", last, f.srv.Index())
	}
	// Node events re-read the node as JSON: device attributes survive (event payloads would
	// lose them through mapstructure).
	f.srv.UpdateNode("node-t4-0000", "NodeStreamEvent", func(n *api.Node) { n.Meta["rack"] = "r1" })
	poll.Until(t, "node update", func() bool {
		for _, n := range f.snapshot(t).Nodes {
			if n.ID == "node-t4-0000" && n.Meta["rack"] == "r1" {
				return n.Devices[0].Attributes["memory"].Int != nil
			}
		}
		return false
	})
	last = f.b.Index()
	before := len(f.srv.Requests())
	f.srv.DropStreams()
	f.srv.Register(heldJob("second", 1, 1, nil))
	poll.Until(t, "job after reconnect", func() bool { return len(f.snapshot(t).Pending) == 2 })
	poll.Until(t, "the stream reopened", func() bool {
		for _, r := range f.srv.Requests()[before:] {
			if strings.HasPrefix(r, "GET /v1/event/stream") {
				return true
			}
		}
		return false
	})

	var resumed, resynced bool
	for _, r := range f.srv.Requests()[before:] {
		if strings.HasPrefix(r, "GET /v1/event/stream") && strings.Contains(r, fmt.Sprintf("index=%d&", last+1)) {
			resumed = true
		}
		if strings.HasPrefix(r, "GET /v1/nodes") {
			resynced = true
		}
	}
	if !resumed || !resynced {
		t.Errorf("after the drop: resumed at %d = %v, resynced = %v; requests:\n%s", last+1, resumed, resynced, strings.Join(f.srv.Requests()[before:], "\n"))
	}
	for _, r := range f.srv.Requests() {
		if strings.HasPrefix(r, "GET /v1/event/stream") {
			for _, topic := range []string{"topic=Job%3A%2A", "topic=Allocation%3A%2A", "topic=Evaluation%3A%2A", "topic=Node%3A%2A", "namespace=%2A"} {
				if !strings.Contains(r, topic) {
					t.Errorf("stream request %q lacks %s", r, topic)
				}
			}
			break
		}
	}
	if err := stop(); err != nil {
		t.Errorf("Watch returned %v", err)
	}
}

func TestResyncCatchesEventsOutsideTheBuffer(t *testing.T) {
	f, _ := watchedFixture(t)
	// While disconnected, a job arrives and its event falls out of the server's buffer.
	f.srv.DropStreams()
	f.srv.Register(heldJob("missed", 1, 1, nil))
	f.srv.TrimEvents(f.srv.Index() + 1)
	poll.Until(t, "job seen through the resync", func() bool { return len(f.snapshot(t).Pending) == 1 })
}

func pinnedFixture(t *testing.T, mod func(*Config)) (*fixture, cluster.Decision) {
	t.Helper()
	return pinnedFixtureOf(t, mod, "batch", nil)
}

// pinnedFixtureOf is pinnedFixture with a job of the given type and group meta.
func pinnedFixtureOf(t *testing.T, mod func(*Config), typ string, groupMeta map[string]string) (*fixture, cluster.Decision) {
	t.Helper()
	f := newFixture(t, mod)
	job := heldJob("run", 2, 1, map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50", "hetgpu.steps": "1e6"})
	job.Type = &typ
	job.TaskGroups[0].Meta = groupMeta
	f.srv.Register(job)
	f.resync(t)
	snap := f.snapshot(t)
	d := decide(snap, snap.Pending[0], "node-v100-00")
	res, _ := f.b.Pin(context.Background(), []cluster.Decision{d})
	if !res[0].Applied {
		t.Fatalf("pin = %+v", res)
	}
	f.resync(t)
	return f, d
}

// TestFaultsReholdAndDecideAgain: a fault of the pinned node or GPUs leaves the running
// allocation to Nomad (a drain runs it to the deadline, an unhealthy GPU does not stop it);
// hetgpu re-holds only once Nomad has something to place anew that the pin forbids.
func TestFaultsReholdAndDecideAgain(t *testing.T) {
	v100 := "node-v100-00"
	tests := []struct {
		name string
		// break_ is the fault; a running allocation survives it when keepsRunning.
		break_       func(s *nomadtest.Server)
		keepsRunning bool
		// end is what Nomad does later to the running allocation (nil: nothing).
		end    func(s *nomadtest.Server, allocID string)
		reason string
	}{
		{"node down", func(s *nomadtest.Server) {
			s.UpdateNode(v100, "NodeStreamEvent", func(n *api.Node) { n.Status = api.NodeStatusDown })
		}, false, nil, "pinned node v100 is down"},
		{"node drained, service job migrated at the deadline", func(s *nomadtest.Server) {
			s.UpdateNode(v100, "NodeDrain", func(n *api.Node) { n.DrainStrategy = &api.DrainStrategy{} })
		}, true, func(s *nomadtest.Server, _ string) { s.DrainDeadline(v100) }, "pinned node v100 is draining"},
		{"node ineligible", func(s *nomadtest.Server) {
			s.UpdateNode(v100, "NodeEligibility", func(n *api.Node) { n.SchedulingEligibility = api.NodeSchedulingIneligible })
		}, true, func(s *nomadtest.Server, id string) {
			s.SetAllocStatus(id, api.AllocClientStatusFailed, time.Time{}, time.Now())
		}, "pinned node v100 is ineligible"},
		{"gpu unhealthy", func(s *nomadtest.Server) {
			s.UpdateNode(v100, "NodeRegistration", func(n *api.Node) {
				n.NodeResources.Devices[0].Instances[1].Healthy = false
				n.NodeResources.Devices[0].Instances[1].HealthDescription = "XID 79: fallen off the bus"
			})
		}, true, func(s *nomadtest.Server, id string) {
			s.SetAllocStatus(id, api.AllocClientStatusFailed, time.Time{}, time.Now())
		}, "pinned GPU GPU-v100-1 is unhealthy (XID 79"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ := "batch"
			if strings.Contains(tt.name, "service") {
				typ = "service"
			}
			f, _ := pinnedFixtureOf(t, nil, typ, nil)
			m, _ := f.b.Maintain(context.Background())
			if len(m.Reheld) != 0 {
				t.Fatalf("healthy pin re-held: %+v", m.Reheld)
			}
			alloc := f.srv.Allocs("default", "run")[0]
			tt.break_(f.srv)
			f.resync(t)
			if tt.keepsRunning {
				m, _ = f.b.Maintain(context.Background())
				if len(m.Reheld) != 0 {
					t.Fatalf("re-held while its allocation still runs: %+v", m.Reheld)
				}
				if a := f.srv.Allocs("default", "run"); len(a) != 1 || a[0].DesiredStatus != "run" || a[0].ClientStatus != "running" {
					t.Fatalf("the running allocation was touched: %+v", a)
				}
				tt.end(f.srv, alloc.ID)
				f.resync(t)
			}
			m, err := f.b.Maintain(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Reheld) != 1 || !m.Reheld[0].Applied || !strings.Contains(m.Reheld[0].Reason, tt.reason) {
				t.Fatalf("re-held = %+v, want %q", m.Reheld, tt.reason)
			}
			job := f.srv.Job("default", "run")
			if !groupHeld(job, job.TaskGroups[0]) {
				t.Error("job not held again in Nomad")
			}
			if !strings.Contains(job.UI.Description, "re-held") || !strings.Contains(job.UI.Description, tt.reason) {
				t.Errorf("ui does not say why: %q", job.UI.Description)
			}
			f.resync(t)
			if p := f.snapshot(t).Pending; len(p) != 1 || p[0].ID != "run" {
				t.Errorf("re-held job not pending again: %+v", p)
			}
			if m, _ := f.b.Maintain(context.Background()); len(m.Finished) != 0 {
				t.Errorf("a run that never finished was reported finished: %+v", m.Finished)
			}
		})
	}
}

// TestMovedAnyNumberOfTimes: a preemptible job is preempted (its stopped allocation ends
// "complete") and pinned elsewhere; then that node goes down and the job moves again, and
// again. The allocations the moves stopped or lost never count as the group having finished.
func TestMovedAnyNumberOfTimes(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.AddNode("node-v100-01", "v100b", "Tesla V100-SXM2-16GB", 8)
	f.srv.AddNode("node-v100-02", "v100c", "Tesla V100-SXM2-16GB", 8)
	f.srv.AddNode("node-v100-03", "v100d", "Tesla V100-SXM2-16GB", 8)
	f.srv.Register(heldJob("run", 2, 1, map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50", "hetgpu.preemptible": "true"}))
	nodes := []string{"node-v100-00", "node-v100-01", "node-v100-02", "node-v100-03"}
	for i, node := range nodes {
		f.resync(t)
		snap := f.snapshot(t)
		if len(snap.Pending) != 1 {
			t.Fatalf("move %d: pending = %+v", i, snap.Pending)
		}
		res, _ := f.b.Pin(context.Background(), []cluster.Decision{decide(snap, snap.Pending[0], node)})
		if !res[0].Applied {
			t.Fatalf("move %d: pin = %+v", i, res)
		}
		f.resync(t)
		var live []*api.Allocation
		for _, a := range f.srv.Allocs("default", "run") {
			if a.DesiredStatus == "run" && a.ClientStatus == "running" {
				live = append(live, a)
			}
		}
		if len(live) != 1 || live[0].NodeID != node {
			t.Fatalf("move %d: live allocations %+v, want one on %s", i, live, node)
		}
		switch i {
		case 0:
			res, err := f.b.Preempt(context.Background(), []cluster.Preemption{{Namespace: "default", JobID: "run", Group: "train", Reason: "test"}})
			if err != nil || len(res) != 1 || !res[0].Applied {
				t.Fatalf("preempt = %+v, %v", res, err)
			}
			continue
		case len(nodes) - 1:
			continue
		}
		f.srv.UpdateNode(node, "NodeStreamEvent", func(n *api.Node) { n.Status = api.NodeStatusDown })
		f.resync(t)
		m, _ := f.b.Maintain(context.Background())
		if len(m.Reheld) != 1 || !m.Reheld[0].Applied {
			t.Fatalf("move %d: re-held = %+v", i, m.Reheld)
		}
		if len(m.Finished) != 0 {
			t.Fatalf("move %d: finished = %+v", i, m.Finished)
		}
	}
	if got := len(f.srv.Allocs("default", "run")); got != len(nodes) {
		t.Errorf("%d allocations, want one per node", got)
	}
}

// TestDrainDeadlineEndsBatchJob: a batch job killed by a drain's deadline is finished to
// Nomad (its task did not fail), so nothing is placed anew: no re-hold, and no finished run
// to learn either, since the allocation was told to stop.
func TestDrainDeadlineEndsBatchJob(t *testing.T) {
	f, _ := pinnedFixture(t, nil)
	f.srv.UpdateNode("node-v100-00", "NodeDrain", func(n *api.Node) { n.DrainStrategy = &api.DrainStrategy{} })
	f.srv.DrainDeadline("node-v100-00")
	f.resync(t)
	if st := *f.srv.Job("default", "run").Status; st != "dead" {
		t.Fatalf("job status %s after the drain deadline, want dead", st)
	}
	m, _ := f.b.Maintain(context.Background())
	if len(m.Reheld) != 0 || len(m.Finished) != 0 {
		t.Errorf("re-held %+v, finished %+v; want neither", m.Reheld, m.Finished)
	}
}

// TestStoppedRunNotFinished: allocations stopped by a job stop, a preemption or a failure are
// not a finished run; one that completes on its own is, once.
func TestStoppedRunNotFinished(t *testing.T) {
	f, _ := pinnedFixture(t, nil)
	alloc := f.srv.Allocs("default", "run")[0]
	job := f.srv.Job("default", "run")
	job.Stop = ptr(true)
	f.srv.Register(job)
	f.resync(t)
	if a := f.srv.Allocs("default", "run"); a[0].ID != alloc.ID || a[0].ClientStatus != "complete" || a[0].DesiredStatus != "stop" {
		t.Fatalf("allocations after the stop: %+v", a)
	}
	if m, _ := f.b.Maintain(context.Background()); len(m.Finished) != 0 {
		t.Errorf("a stopped run was reported finished: %+v", m.Finished)
	}
}

func TestLearnFinishedRun(t *testing.T) {
	t.Run("whole run", func(t *testing.T) { testLearnFinishedRun(t, "") })
	// A run resumed after a preemption did only the rest of hetgpu.steps: steps over its
	// runtime would overstate its throughput, so the sidecar's record has none (the task
	// driver's, measured on the GPUs, has it).
	t.Run("resumed run", func(t *testing.T) { testLearnFinishedRun(t, "1h0m0s") })
}

func testLearnFinishedRun(t *testing.T, ran string) {
	clock := time.Now()
	now := clock
	meta := map[string]string{"hetgpu.runtime": "5m"}
	if ran != "" {
		meta["hetgpu.ran"] = ran
	}
	f, d := pinnedFixtureOf(t, func(c *Config) {
		c.SampleDeviceStats = true
		c.SampleEvery = time.Nanosecond
		c.Now = func() time.Time { return now }
	}, "batch", meta)
	for _, id := range d.Assign[0].InstanceIDs {
		f.srv.SetPower(id, 250)
	}
	alloc := f.srv.Allocs("default", "run")[0]
	start := clock.Add(-100 * time.Second)
	f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusRunning, start, time.Time{})
	f.resync(t)
	if m, _ := f.b.Maintain(context.Background()); len(m.Finished) != 0 {
		t.Fatalf("running alloc reported finished: %+v", m.Finished)
	}
	f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusComplete, start, start.Add(200*time.Second))
	f.resync(t)
	now = start.Add(210 * time.Second)
	if m, _ := f.b.Maintain(context.Background()); len(m.Finished) != 0 {
		t.Fatalf("run reported within the grace the task driver gets: %+v", m.Finished)
	}
	now = start.Add(221 * time.Second)
	r := f.finishedRun(t)
	o := r.Obs
	if o.JobID != "run" || o.GPUType != "v100" || o.GPUs != 2 || o.Nodes != 1 || o.RuntimeS != 200 || o.ModelName != "ResNet-50" {
		t.Errorf("observation = %+v", o)
	}
	if want := 1e6 / 200; ran == "" && o.Throughput != want || ran != "" && o.Throughput != 0 {
		t.Errorf("throughput = %v, want steps/runtime = %v for a whole run and none for a resumed one (hetgpu.ran %q)", o.Throughput, want, ran)
	}
	// The estimate and the earlier run time travel with the run (estimate calibration).
	var wantRan time.Duration
	if ran != "" {
		wantRan, _ = time.ParseDuration(ran)
	}
	if r.EstRuntime != 5*time.Minute || r.Ran != wantRan {
		t.Errorf("run carries estimate %v and earlier run time %v, want 5m0s and %v", r.EstRuntime, r.Ran, wantRan)
	}
	// One sample of 500 W after ~100 s of running: energy is the integral from the start.
	if r.Samples < 1 || o.EnergyJ < 500*90 || o.PeakPowerW != 500 {
		t.Errorf("energy %v J from %d samples, peak %v W", o.EnergyJ, r.Samples, o.PeakPowerW)
	}
	if m, _ := f.b.Maintain(context.Background()); len(m.Finished) != 0 {
		t.Errorf("run reported twice: %+v", m.Finished)
	}
}

func TestInvalidAnnotationKeepsJobHeld(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.Register(heldJob("bad", 1, 1, map[string]string{"hetgpu.enable": "true", "hetgpu.batch_size": "sixty-four"}))
	f.resync(t)
	if p := f.snapshot(t).Pending; len(p) != 0 {
		t.Fatalf("invalid job offered for placement: %+v", p)
	}
	m, _ := f.b.Maintain(context.Background())
	if len(m.Invalid) != 1 || !strings.Contains(m.Invalid[0].Err, `hetgpu.batch_size = "sixty-four"`) {
		t.Fatalf("invalid = %+v", m.Invalid)
	}
	job := f.srv.Job("default", "bad")
	if !groupHeld(job, job.TaskGroups[0]) || !strings.Contains(job.UI.Description, "sixty-four") {
		t.Errorf("job not held with the error shown: %q", job.UI.Description)
	}
	v := *job.Version
	f.resync(t)
	f.b.Maintain(context.Background())
	if *f.srv.Job("default", "bad").Version != v {
		t.Error("the same error was written again")
	}
}

func TestShadowPlacement(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Shadow = true })
	job := heldJob("free", 2, 1, nil)
	job.Constraints = nil // not held: Nomad places it itself
	f.srv.Register(job)
	f.resync(t)
	snap := f.snapshot(t)
	if len(snap.Pending) != 1 {
		t.Fatalf("shadow mode offers %d jobs, want the un-held annotated one", len(snap.Pending))
	}
	for _, a := range snap.Running {
		if a.JobID == "free" {
			t.Error("the shadow job's own allocation occupies GPUs in its snapshot")
		}
	}
	m, _ := f.b.Maintain(context.Background())
	if len(m.Placed) != 1 || m.Placed[0].JobKey != "default/free/train" || len(m.Placed[0].DeviceIDs) != 2 {
		t.Fatalf("placed = %+v", m.Placed)
	}
	if m, _ := f.b.Maintain(context.Background()); len(m.Placed) != 0 {
		t.Error("placement reported twice")
	}
}

func TestRelease(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.Register(heldJob("rel", 1, 1, nil))
	if _, err := Release(context.Background(), f.srv.Client(), nil, "default", "rel"); err != nil {
		t.Fatal(err)
	}
	job := f.srv.Job("default", "rel")
	if groupHeld(job, job.TaskGroups[0]) || len(f.srv.Allocs("default", "rel")) != 1 {
		t.Errorf("released job not placed by Nomad")
	}
	if _, err := Release(context.Background(), f.srv.Client(), nil, "default", "rel"); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second release err = %v, want ErrNotHeld", err)
	}
}

func TestPreemptible(t *testing.T) {
	for _, tt := range []struct {
		name        string
		preemptible bool
	}{{"annotated", true}, {"not annotated", false}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			meta := map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50", "hetgpu.runtime": "2h"}
			if tt.preemptible {
				meta["hetgpu.preemptible"] = "true"
			}
			f.srv.Register(heldJob("run", 2, 1, meta))
			f.resync(t)
			snap := f.snapshot(t)
			if len(snap.Preemptible) != 0 {
				t.Fatalf("a held job is preemptible: %+v", snap.Preemptible)
			}
			d := decide(snap, snap.Pending[0], "node-v100-00")
			if res, _ := f.b.Pin(context.Background(), []cluster.Decision{d}); !res[0].Applied {
				t.Fatalf("pin = %+v", res)
			}
			f.resync(t)
			alloc := f.srv.Allocs("default", "run")[0]
			f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusRunning, f.b.now().Add(-30*time.Minute), time.Time{})
			f.resync(t)
			snap = f.snapshot(t)
			if !tt.preemptible {
				if len(snap.Preemptible) != 0 {
					t.Fatalf("job without %s listed preemptible", annot.KeyPreemptible)
				}
				res, err := f.b.Preempt(context.Background(), []cluster.Preemption{{Namespace: "default", JobID: "run", Group: "train", Reason: "test"}})
				if err != nil || res[0].Applied || res[0].Err == nil || !strings.Contains(res[0].Err.Error(), annot.KeyPreemptible) {
					t.Fatalf("preempting a job that did not opt in: %+v, %v", res, err)
				}
				if job := f.srv.Job("default", "run"); groupHeld(job, job.TaskGroups[0]) || len(f.srv.Stopped()) != 0 {
					t.Fatal("job re-held or stopped although it is not preemptible")
				}
				return
			}
			if len(snap.Preemptible) != 1 {
				t.Fatalf("preemptible = %+v", snap.Preemptible)
			}
			j := snap.Preemptible[0]
			if j.Key() != "default/run/train" || j.GPUs != 2 || !j.Hetgpu.Preemptible {
				t.Fatalf("preemptible job = %+v", j)
			}
			if rem := j.Hetgpu.EstRuntime; rem < 89*time.Minute || rem > 91*time.Minute {
				t.Errorf("remaining estimate %v, want about 1h30m of the annotated 2h", rem)
			}
			if a := j.AttainedGPUSeconds; a < 2*1790 || a > 2*1810 {
				t.Errorf("attained %v GPU-seconds, want about 2 x 1800", a)
			}
			for _, c := range j.Constraints {
				if c.LTarget == NodeTarget {
					t.Errorf("the preemptible job keeps its pin constraint %v", c)
				}
			}
			res, err := f.b.Preempt(context.Background(), []cluster.Preemption{{Namespace: "default", JobID: "run", Group: "train", Reason: "a better-ranked job needs its GPUs"}})
			if err != nil || !res[0].Applied {
				t.Fatalf("preempt = %+v, %v", res, err)
			}
			job := f.srv.Job("default", "run")
			if !groupHeld(job, job.TaskGroups[0]) {
				t.Fatal("preempted job not held again in Nomad")
			}
			// A batch allocation survives a job update: the backend stops it.
			if st := f.srv.Stopped(); len(st) != 1 || st[0] != alloc.ID {
				t.Fatalf("stopped allocations %v, want [%s]", st, alloc.ID)
			}
			if !strings.Contains(job.UI.Description, "preempted: a better-ranked job needs its GPUs") {
				t.Errorf("ui does not say why: %q", job.UI.Description)
			}
		})
	}
}

// A pin onto GPUs another group's allocation still holds (a preempted job whose task is still
// stopping) is a conflict, not a register Nomad would fail to place.
func TestPinOntoGPUsStillHeld(t *testing.T) {
	f, d := pinnedFixture(t, nil)
	alloc := f.srv.Allocs("default", "run")[0]
	f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusRunning, f.b.now(), time.Time{})
	f.srv.Register(heldJob("next", 2, 1, nil))
	f.resync(t)
	snap := f.snapshot(t)
	var next cluster.Job
	for _, j := range snap.Pending {
		if j.ID == "next" {
			next = j
		}
	}
	// The decision takes exactly the GPUs "run" holds.
	dn := d
	dn.JobID, dn.Group = "next", next.Group
	res, err := f.b.Pin(context.Background(), []cluster.Decision{dn})
	if err != nil || len(res) != 1 || res[0].Applied || !res[0].Conflict || !strings.Contains(res[0].Err.Error(), "still held by allocation "+alloc.ID) {
		t.Fatalf("pin onto held GPUs = %+v, %v", res, err)
	}
	if job := f.srv.Job("default", "next"); !groupHeld(job, job.TaskGroups[0]) {
		t.Fatal("the job was pinned onto busy GPUs")
	}
	// Once the allocation ended, the same pin goes through.
	f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusComplete, time.Time{}, f.b.now())
	f.resync(t)
	f.snapshot(t)
	if res, _ := f.b.Pin(context.Background(), []cluster.Decision{dn}); !res[0].Applied {
		t.Fatalf("pin after the allocation ended = %+v", res)
	}
}

// TestAllocLifetime: the service checks a run record's runtime against the lifetime of the
// allocation it names; the backend answers from the allocations it tracks.
func TestAllocLifetime(t *testing.T) {
	f, _ := pinnedFixture(t, nil)
	alloc := f.srv.Allocs("default", "run")[0]
	start := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusRunning, start, time.Time{})
	f.resync(t)
	if s, e, ok := f.b.AllocLifetime(alloc.ID); !ok || !s.Equal(start) || !e.IsZero() {
		t.Errorf("running: %v %v %v", s, e, ok)
	}
	end := start.Add(5 * time.Minute)
	f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusComplete, start, end)
	f.resync(t)
	if s, e, ok := f.b.AllocLifetime(alloc.ID); !ok || !s.Equal(start) || !e.Equal(end) {
		t.Errorf("complete: %v %v %v", s, e, ok)
	}
	if _, _, ok := f.b.AllocLifetime("no-such-alloc"); ok {
		t.Error("an unknown allocation has a lifetime")
	}
}
