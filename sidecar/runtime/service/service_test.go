package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

func pinOf(t *testing.T, job *api.Job) (nodes, devs []string) {
	t.Helper()
	n, d, ok := nomad.PinOf(job.TaskGroups[0])
	if !ok {
		t.Fatalf("job %s is not pinned: %+v", *job.ID, job.TaskGroups[0].Constraints)
	}
	return n, d
}

func TestRoundPinsAndExplains(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	h.Nomad.Register(servicetest.HeldJob("resnet", 2, 1, nil))
	h.Nomad.Register(servicetest.HeldJob("slow", 1, 1, map[string]string{"hetgpu.enable": "true", "hetgpu.min_throughput": "250"}))
	h.Round()

	nodes, devs := pinOf(t, h.Nomad.Job("default", "resnet"))
	if nodes[0] != "node-a100-00" || len(devs) != 2 {
		t.Errorf("resnet pinned to %v %v, want 2 A100s", nodes, devs)
	}
	recs := h.Service.Decisions(10, 0)
	if len(recs) != 2 {
		t.Fatalf("decisions = %d", len(recs))
	}
	for _, r := range recs {
		if r.Status != store.StatusPinned || r.Decision == nil || r.Rank == 0 || len(r.Estimates) != 3 {
			t.Errorf("record %s = %+v", r.JobKey, r)
		}
	}
	ex, err := h.Service.Explain("default", "slow")
	if err != nil {
		t.Fatal(err)
	}
	g := ex.Groups[0]
	if g.Status != store.StatusPinned || !strings.Contains(g.Summary, "pinned to") {
		t.Errorf("explain = %+v", g)
	}
	var t4 *store.Alternative
	for i, a := range g.Alternatives {
		if a.GPUType == "t4" {
			t4 = &g.Alternatives[i]
		}
	}
	if t4 == nil || !strings.Contains(t4.Why, "below the job's T_min") {
		t.Errorf("the T4 alternative does not say it misses T_min: %+v", g.Alternatives)
	}
	chosen := 0
	for _, e := range g.Estimates {
		if e.Chosen {
			chosen++
			if e.EnergyPerStepJ <= 0 || !e.MeetsTMin {
				t.Errorf("chosen estimate = %+v", e)
			}
		}
	}
	if chosen != 1 {
		t.Errorf("%d chosen estimates", chosen)
	}
	if _, err := h.Service.Explain("default", "nope"); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("explain of an unknown job: %v", err)
	}
}

func TestWaitingJobInQueueAndExplain(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	// FIFO and first fit on the fastest type: a takes the A100s, b the V100s; c fit the free
	// GPUs when the round began but waits behind them, and next round waits for capacity.
	for _, id := range []string{"a", "b", "c"} {
		h.Nomad.Register(servicetest.HeldJob(id, 8, 1, nil))
	}
	h.Round()
	q := h.Service.Queue()
	if len(q.Jobs) != 3 || q.Jobs[2].Status != "waiting" || q.Jobs[2].Wait != "behind" || q.Jobs[2].Infeasible ||
		!strings.Contains(q.Jobs[2].Reason, "the 2 jobs ranked ahead that were placed came first") ||
		q.Jobs[2].Features["gpus"] != 8 || q.Jobs[2].Model != "resnet/ResNet-50" {
		t.Fatalf("queue = %+v", q)
	}
	h.Round()
	ex, err := h.Service.Explain("default", "c")
	if err != nil {
		t.Fatal(err)
	}
	g := ex.Groups[0]
	const reason = "needs 8 free GPUs of one type on one node; at most 4 T4 are free on one node"
	if g.Status != "waiting" || g.Wait != "capacity" || g.Reason != reason || g.Infeasible ||
		!strings.Contains(g.Summary, "rank 1 of 1") || !strings.Contains(g.Summary, "waits for capacity: "+reason) || len(g.Estimates) != 3 {
		t.Errorf("waiting explanation = %+v", g)
	}
	for _, e := range g.Estimates {
		if e.FitsNow {
			t.Errorf("8 GPUs fit on %s?", e.GPUType)
		}
	}
	// The job says the same in its ui description: its rank and what it waits for.
	if l := nomad.GroupLines(h.Nomad.Job("default", "c"))["train"]; !strings.Contains(l, "held by hetgpu: rank 1 of 1, waiting for 8 GPUs") {
		t.Errorf("a group that only waits: ui line %q, want its rank and what it waits for", l)
	}
}

func TestConflictRecordedThenPinned(t *testing.T) {
	var n atomic.Int32
	h := servicetest.NewHarness(t, nil)
	h.Nomad.Register(servicetest.HeldJob("c", 1, 1, nil))
	h.Nomad.RegisterHook = func(job *api.Job) error {
		if n.Add(1) == 1 {
			return errors.New("Enforcing job modify index 12: job exists with conflicting job modify index: 13")
		}
		return nil
	}
	h.Round()
	r, _ := h.Store.Latest("default/c/train")
	if r.Status != store.StatusConflict {
		t.Fatalf("first round status = %q (%s)", r.Status, r.Message)
	}
	h.Round()
	r, _ = h.Store.Latest("default/c/train")
	if r.Status != store.StatusPinned {
		t.Fatalf("second round status = %q (%s)", r.Status, r.Message)
	}
	if body := scrape(t, h); !strings.Contains(body, "hetgpu_pin_conflicts_total 1") || !strings.Contains(body, `hetgpu_pins_total{result="applied"} 1`) {
		t.Errorf("metrics:\n%s", body)
	}
}

func TestShadowMode(t *testing.T) {
	h := servicetest.NewHarness(t, func(c *service.Config, b *nomad.Config) { c.Shadow, b.Shadow = true, true })
	h.Nomad.Register(servicetest.HeldJob("held", 2, 1, nil))
	free := servicetest.HeldJob("free", 1, 1, nil)
	free.Constraints = nil
	h.Nomad.Register(free) // Nomad places it: first fit, the T4 node
	h.Round()
	h.Round()
	job := h.Nomad.Job("default", "held")
	if _, _, ok := nomad.PinOf(job.TaskGroups[0]); ok {
		t.Fatal("shadow mode pinned a job")
	}
	recs := h.Service.Decisions(10, 0)
	if len(recs) != 2 {
		t.Fatalf("shadow decisions = %+v", recs)
	}
	r, _ := h.Store.Latest("default/free/train")
	if r.Status != store.StatusShadow || r.Shadow == nil {
		t.Fatalf("no shadow comparison: %+v", r)
	}
	// The fake Nomad places first fit by node ID (the A100 node); hetgpu's shadow decision used
	// a snapshot without the job's own allocation.
	sh := r.Shadow
	if sh.NomadGPUType != "a100" || len(sh.NomadDeviceIDs) != 1 || sh.SameGPUType != (sh.NomadGPUType == r.Decision.GPUType) ||
		sh.NomadPredThr != servicetest.Speeds[sh.NomadGPUType][0] {
		t.Errorf("comparison = %+v (hetgpu chose %s)", sh, r.Decision.GPUType)
	}
}

func TestRestartKeepsDecisionsAndState(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	h.Nomad.Register(servicetest.HeldJob("a", 1, 1, nil))
	h.Nomad.Register(servicetest.HeldJob("bad", 1, 1, map[string]string{"hetgpu.max_nodes": "zero"}))
	h.Round()
	before := h.Service.Decisions(100, 0)
	h.Stop()
	h.Nomad.Register(servicetest.HeldJob("b", 1, 1, nil)) // arrives while the sidecar is down
	h.Start()
	h.Round()
	after := h.Service.Decisions(100, 0)
	if len(after) != len(before)+1 {
		t.Fatalf("decisions before %d, after restart %d (want one more)", len(before), len(after))
	}
	for i, b := range before {
		if a := after[i+1]; a.Seq != b.Seq || a.JobKey != b.JobKey || a.Status != b.Status {
			t.Errorf("decision %d changed across the restart: %+v vs %+v", i, a, b)
		}
	}
	if _, _, ok := nomad.PinOf(h.Nomad.Job("default", "b").TaskGroups[0]); !ok {
		t.Error("job submitted while the sidecar was down was not pinned after restart")
	}
	if q := h.Service.Queue(); len(q.Invalid) != 1 || !strings.Contains(q.Invalid[0].Error, "hetgpu.max_nodes") {
		t.Errorf("invalid jobs after restart = %+v", q.Invalid)
	}
}

func TestLearnFromFinishedRunUnlessDriverPosted(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	meta := map[string]string{"hetgpu.enable": "true", "hetgpu.model": "BERT", "hetgpu.steps": "60000"}
	h.Nomad.Register(servicetest.HeldJob("l1", 1, 1, meta))
	h.Nomad.Register(servicetest.HeldJob("l2", 1, 1, meta))
	h.Round()
	start := time.Now().Add(-2 * time.Minute)
	// The driver reports l2's allocation itself (claim alloc/<id>/train).
	a2 := h.Nomad.Allocs("default", "l2")[0]
	err := h.Service.Observe(context.Background(), cluster.Observation{Namespace: "default", JobID: "l2", Group: "train",
		Task: "train", AllocID: a2.ID, GPUType: "NVIDIA A100-SXM4-40GB", GPUs: 1, Throughput: 650, EnergyJ: 1000, RuntimeS: 60}, service.SourceDriver)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"l1", "l2"} {
		a := h.Nomad.Allocs("default", id)[0]
		h.Nomad.SetAllocStatus(a.ID, api.AllocClientStatusComplete, start, start.Add(100*time.Second))
	}
	h.Round()
	h.Round()
	got := h.Pred.Learned()
	if len(got) != 2 {
		t.Fatalf("learned %d observations, want the driver's and one from l1's finished allocation: %+v", len(got), got)
	}
	if got[0].JobID != "l2" || got[0].GPUType != "a100" {
		t.Errorf("driver observation = %+v", got[0])
	}
	if o := got[1]; o.JobID != "l1" || o.RuntimeS != 100 || o.Throughput != 600 || o.ModelName != "BERT" {
		t.Errorf("sidecar observation = %+v", o)
	}
	if body := scrape(t, h); !strings.Contains(body, `hetgpu_observations_total{source="sidecar"} 1`) ||
		!strings.Contains(body, `hetgpu_prediction_relative_error_count{quantity="throughput"} 2`) {
		t.Errorf("metrics:\n%s", body)
	}
	// The driver's late report of l1's allocation, after a restart, is a duplicate of the
	// sidecar's record: stored and learned once.
	a1 := h.Nomad.Allocs("default", "l1")[0]
	h.Stop()
	h.Start()
	res, err := h.Service.ObserveBatch(context.Background(), []cluster.Observation{{Namespace: "default", JobID: "l1", Group: "train",
		Task: "train", AllocID: a1.ID, GPUType: "a100", GPUs: 1, Throughput: 640, RuntimeS: 99}}, service.SourceDriver, "")
	if err != nil || res.Duplicates != 1 || res.Accepted != 0 || res.Records[0].DuplicateOf != "alloc/"+a1.ID {
		t.Errorf("driver report after the sidecar's: %+v %v, want a duplicate of alloc/%s", res, err, a1.ID)
	}
	if n := len(h.Pred.Learned()); n != 2 || h.Store.ObservationCount() != 2 {
		t.Errorf("learned %d, stored %d; want 2 and 2", n, h.Store.ObservationCount())
	}
}

// A partial or failed run is stored but never reaches the learner or the tuner.
func TestPartialRunsNotLearned(t *testing.T) {
	tuner := &countingTuner{}
	h := servicetest.NewHarness(t, nil, func(h *servicetest.Harness) { h.Tuner = tuner })
	base := cluster.Observation{Namespace: "default", JobID: "p", Group: "train", GPUType: "v100", GPUs: 1, Throughput: 10, RuntimeS: 60}
	partial, failed, ok := base, base, base
	partial.Partial, partial.AllocID = true, "A"
	failed.ExitCode, failed.AllocID = 1, "B"
	ok.AllocID = "C"
	res, err := h.Service.ObserveBatch(context.Background(), []cluster.Observation{partial, failed, ok}, service.SourceDriver, "")
	if err != nil || res.Accepted != 3 || res.Partial != 2 || res.Learned != 1 {
		t.Fatalf("result %+v %v, want 3 accepted, 2 partial, 1 learned", res, err)
	}
	if n := len(h.Pred.Learned()); n != 1 {
		t.Errorf("learner got %d runs, want 1", n)
	}
	if observed, _, _ := tuner.counts(); observed != 1 {
		t.Errorf("tuner got %d runs, want 1", observed)
	}
}

func TestObservationValidation(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	good := cluster.Observation{JobID: "j", Group: "g", GPUType: "v100", GPUs: 2, Throughput: 10, RuntimeS: 5}
	for _, tt := range []struct {
		field string
		mod   func(o *cluster.Observation)
	}{
		{"job_id", func(o *cluster.Observation) { o.JobID = "" }},
		{"group", func(o *cluster.Observation) { o.Group = "" }},
		{"gpu_type", func(o *cluster.Observation) { o.GPUType = "tpu-v4" }},
		{"gpus", func(o *cluster.Observation) { o.GPUs = 0 }},
		{"throughput", func(o *cluster.Observation) { o.Throughput = -1 }},
		{"runtime_s", func(o *cluster.Observation) { o.RuntimeS = 0 }},
		{"energy_j", func(o *cluster.Observation) { o.EnergyJ = math.NaN() }},
		{"steps", func(o *cluster.Observation) { o.Steps = -1 }},
		{"time", func(o *cluster.Observation) { o.Time = time.Now().Add(48 * time.Hour) }},
	} {
		o := good
		tt.mod(&o)
		err := h.Service.Observe(context.Background(), o, service.SourceDriver)
		var ve *service.ValidationError
		if !errors.As(err, &ve) || ve.Field != tt.field || ve.Expected == "" {
			t.Errorf("%s: err = %v", tt.field, err)
		}
	}
	if err := h.Service.Observe(context.Background(), good, service.SourceDriver); err != nil {
		t.Errorf("good observation rejected: %v", err)
	}
	if n := h.Store.ObservationCount(); n != 1 {
		t.Errorf("stored %d observations, want 1", n)
	}
}

func TestReholdThenDecideAgain(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	h.Nomad.Register(servicetest.HeldJob("r", 2, 1, nil))
	h.Round()
	nodes, _ := pinOf(t, h.Nomad.Job("default", "r"))
	h.Nomad.UpdateNode(nodes[0], "NodeStreamEvent", func(n *api.Node) { n.Status = api.NodeStatusDown })
	h.Round() // maintain re-holds; the same round decides again
	job := h.Nomad.Job("default", "r")
	n2, _ := pinOf(t, job)
	if n2[0] == nodes[0] {
		t.Fatalf("re-pinned to the dead node %s", n2[0])
	}
	var statuses []string
	for _, r := range h.Service.Decisions(10, 0) {
		statuses = append(statuses, r.Status)
	}
	if strings.Join(statuses, ",") != "pinned,reheld,pinned" {
		t.Errorf("history = %v", statuses)
	}
	if body := scrape(t, h); !strings.Contains(body, "hetgpu_reheld_total 1") {
		t.Errorf("metrics:\n%s", body)
	}
}

func TestRunLoop(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Service.Run(ctx) }()
	h.Nomad.Register(servicetest.HeldJob("live", 1, 1, nil))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, ok := nomad.PinOf(h.Nomad.Job("default", "live").TaskGroups[0]); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the running service did not pin a new job")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if hl := h.Service.Health(); hl.Status != "ok" || hl.Rounds == 0 || hl.Backend != "nomad" {
		t.Errorf("health = %+v", hl)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// countingTuner records what the service gives it; every second step is adopted.
type countingTuner struct {
	mu       sync.Mutex
	observed int
	tunes    int
	nodes    int
}

func (c *countingTuner) Observe(context.Context, cluster.Observation) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observed++
	return nil
}

func (c *countingTuner) Tune(_ context.Context, snap *cluster.Snapshot) (bool, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tunes++
	c.nodes = len(snap.Nodes)
	return true, c.tunes%2 == 0, nil
}

func (c *countingTuner) counts() (observed, tunes, nodes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.observed, c.tunes, c.nodes
}

// The Tuner gets every measured run and is asked to learn in the background, with the
// cluster's latest snapshot.
func TestTunerStage(t *testing.T) {
	tuner := &countingTuner{}
	h := servicetest.NewHarness(t, func(c *service.Config, _ *nomad.Config) { c.TuneEvery = 10 * time.Millisecond }, func(h *servicetest.Harness) { h.Tuner = tuner })
	h.Round()
	o := cluster.Observation{Namespace: "default", JobID: "t", Group: "train", GPUType: "v100", GPUs: 1, Throughput: 10, RuntimeS: 60}
	if err := h.Service.Observe(context.Background(), o, service.SourceDriver); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Service.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, tunes, _ := tuner.counts(); tunes >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the running service never asked the tuner to learn")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	observed, _, nodes := tuner.counts()
	if observed != 1 || nodes != 3 {
		t.Fatalf("tuner observed %d runs and saw %d nodes; want 1 and 3", observed, nodes)
	}
	m := scrape(t, h)
	for _, want := range []string{`hetgpu_policy_tuning_total{result="adopted"}`, `hetgpu_policy_tuning_total{result="kept"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestNaNEstimatesStillRecorded(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	h.Pred.NaN = true
	h.Nomad.Register(servicetest.HeldJob("nan", 1, 1, nil))
	h.Nomad.Register(servicetest.HeldJob("nan-wait", 64, 1, nil))
	h.Round()
	r, ok := h.Store.Latest("default/nan/train")
	if !ok || r.Status != store.StatusPinned || len(r.Estimates) != 3 {
		t.Fatalf("record with NaN estimates lost: %+v", r)
	}
	if _, err := h.Service.Explain("default", "nan-wait"); err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(h.Service.Queue()); err != nil {
		t.Errorf("queue not encodable: %v", err)
	}
	ex, _ := h.Service.Explain("default", "nan-wait")
	if _, err := json.Marshal(ex); err != nil {
		t.Errorf("explanation not encodable: %v", err)
	}
}

// While a round pins, explain already answers for the jobs being pinned (Nomad shows the pin
// before the round's records are written).
func TestExplainDuringPin(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	h.Nomad.Register(servicetest.HeldJob("p", 1, 1, nil))
	var during string
	h.Nomad.RegisterHook = func(job *api.Job) error {
		ex, err := h.Service.Explain("default", "p")
		if err != nil {
			during = err.Error()
			return nil
		}
		during = ex.Groups[0].Status + ": " + ex.Groups[0].Summary
		return nil
	}
	h.Round()
	if !strings.HasPrefix(during, "pinning: being pinned this round: pinned to 1× A100") {
		t.Errorf("explain during the pin = %q", during)
	}
	ex, err := h.Service.Explain("default", "p")
	if err != nil || ex.Groups[0].Status != store.StatusPinned {
		t.Errorf("explain after the round = %+v, %v", ex, err)
	}
}

// failingLearner fails while fail is set, as a catalog on a full disk or read-only file does.
type failingLearner struct {
	servicetest.Table
	fail atomic.Bool
}

func (f *failingLearner) Observe(ctx context.Context, o cluster.Observation) error {
	if f.fail.Load() {
		return errors.New("append to catalog: read-only file system")
	}
	return f.Table.Observe(ctx, o)
}

// Health is degraded (with the reason) while the catalog or the store cannot be written, and
// recovers when writes succeed again; a run stored while learning failed is still stored.
func TestHealthDegradedWhileStorageFails(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	h.Round()
	if hl := h.Service.Health(); hl.Status != "ok" {
		t.Fatalf("health before = %+v", hl)
	}
	o := cluster.Observation{Namespace: "default", JobID: "h", Group: "train", GPUType: "v100", GPUs: 1, Throughput: 10, RuntimeS: 60}
	fl := &failingLearner{}
	fl.fail.Store(true)
	svc, err := service.New(service.Config{Reconcile: time.Hour}, h.Backend, service.Stages{Ranker: servicetest.FIFO{}, Predictor: fl,
		Placer: servicetest.FirstFit{}, Learner: fl}, h.Store)
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.ObserveBatch(context.Background(), []cluster.Observation{o}, service.SourceDriver, "")
	if err != nil || res.Accepted != 1 || res.LearnError == "" {
		t.Fatalf("result %+v %v: want stored, with the learning error", res, err)
	}
	hl := svc.Health()
	if hl.Status != "degraded" || len(hl.StorageErrors) != 1 || !strings.Contains(hl.StorageErrors[0], "catalog: append to catalog: read-only") {
		t.Errorf("health while the catalog fails = %+v", hl)
	}
	fl.fail.Store(false)
	o.JobID = "h2"
	if _, err := svc.ObserveBatch(context.Background(), []cluster.Observation{o}, service.SourceDriver, ""); err != nil {
		t.Fatal(err)
	}
	if hl := svc.Health(); len(hl.StorageErrors) != 0 {
		t.Errorf("health after a good write = %+v", hl)
	}
	// The store closed under the service: writes fail, health says so.
	h.Stop()
	o.JobID = "h3"
	if _, err := svc.ObserveBatch(context.Background(), []cluster.Observation{o}, service.SourceDriver, ""); err == nil {
		t.Fatal("write to a closed store succeeded")
	}
	if hl := svc.Health(); hl.Status != "degraded" || len(hl.StorageErrors) == 0 || !strings.HasPrefix(hl.StorageErrors[0], "store: ") {
		t.Errorf("health while the store fails = %+v", hl)
	}
}

// panickyLearner panics once.
type panickyLearner struct {
	servicetest.Table
	done atomic.Bool
}

func (p *panickyLearner) Observe(ctx context.Context, o cluster.Observation) error {
	if !p.done.Swap(true) {
		panic("learner bug")
	}
	return p.Table.Observe(ctx, o)
}

// A learner that panics fails its request (the API recovers it) and does not block the next.
func TestLearnerPanicDoesNotBlock(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	pl := &panickyLearner{}
	svc, err := service.New(service.Config{}, h.Backend, service.Stages{Ranker: servicetest.FIFO{}, Predictor: pl,
		Placer: servicetest.FirstFit{}, Learner: pl}, h.Store)
	if err != nil {
		t.Fatal(err)
	}
	o := cluster.Observation{Namespace: "default", JobID: "p1", Group: "train", GPUType: "v100", GPUs: 1, Throughput: 10, RuntimeS: 60}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the learner's panic vanished")
			}
		}()
		_, _ = svc.ObserveBatch(context.Background(), []cluster.Observation{o}, service.SourceDriver, "")
	}()
	o.JobID = "p2"
	done := make(chan error, 1)
	go func() {
		_, err := svc.ObserveBatch(context.Background(), []cluster.Observation{o}, service.SourceDriver, "")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("learning blocked after a panic")
	}
	if n := len(pl.Learned()); n != 1 {
		t.Errorf("learned %d, want 1", n)
	}
}

// lifetimeBackend is the Nomad backend that also knows one allocation's lifetime.
type lifetimeBackend struct {
	*nomad.Backend
	start, end time.Time
}

func (l lifetimeBackend) AllocLifetime(id string) (time.Time, time.Time, bool) {
	return l.start, l.end, id == "A1"
}

// A run longer than the allocation it names lived is refused, naming the allocation.
func TestRuntimeWithinAllocation(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	now := time.Now()
	be := lifetimeBackend{Backend: h.Backend, start: now.Add(-10 * time.Minute), end: now.Add(-5 * time.Minute)}
	svc, err := service.New(service.Config{}, be, service.Stages{Ranker: servicetest.FIFO{}, Predictor: h.Pred,
		Placer: servicetest.FirstFit{}, Learner: h.Pred}, h.Store)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		alloc   string
		runtime float64
		ok      bool
	}{{"A1", 300, true}, {"A1", 3600, false}, {"B2", 3600, true}} {
		o := cluster.Observation{Namespace: "default", JobID: "l" + tt.alloc + fmt.Sprint(tt.runtime), Group: "train", AllocID: tt.alloc,
			GPUType: "v100", GPUs: 1, Throughput: 10, RuntimeS: tt.runtime}
		_, err := svc.ObserveBatch(context.Background(), []cluster.Observation{o}, service.SourceDriver, "")
		var ve *service.ValidationError
		if tt.ok != (err == nil) || !tt.ok && (!errors.As(err, &ve) || ve.Field != "runtime_s" || !ve.OutOfRange || !strings.Contains(ve.Expected, "allocation A1 ran from")) {
			t.Errorf("alloc %s runtime %v: %v, want ok=%v", tt.alloc, tt.runtime, err, tt.ok)
		}
	}
}

// TestFleetSnapshotCountsTheRoundsPins: the snapshot a round decided on shows the GPUs it
// then pinned as free; the fleet view counts them held by the pinned job.
func TestFleetSnapshotCountsTheRoundsPins(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	h.Nomad.Register(servicetest.HeldJob("resnet", 2, 1, nil))
	h.Round()
	_, devs := pinOf(t, h.Nomad.Job("default", "resnet"))
	holder := func(snap *cluster.Snapshot, dev string) string {
		for _, a := range snap.Running {
			for _, d := range a.DeviceIDs {
				if d == dev {
					return a.JobID
				}
			}
		}
		return ""
	}
	for _, d := range devs {
		if got := holder(h.Service.LastSnapshot(), d); got != "" {
			t.Errorf("the snapshot decided on already shows %s held by %q", d, got)
		}
		if got := holder(h.Service.FleetSnapshot(), d); got != "resnet" {
			t.Errorf("fleet view: %s held by %q, want resnet", d, got)
		}
	}
}
