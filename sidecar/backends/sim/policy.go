package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// PipelinePolicy is how the simulator runs a policy (sched.Stages, as sidecar/policies
// registers them), and the only way: each round, after every batch of events, is
// sched.Pipeline.RunRound of the pipeline sched.New builds (as for the live sidecar) against
// the engine (Snapshot -> Ranker -> Preemptor -> Placer -> Pin),
// the code the live sidecar runs against Nomad. The snapshots carry the runtime estimates
// Estimates configures; the time-driven stages (sched.Waker) get the rounds they ask for, and
// the learner every finished run.
type PipelinePolicy struct {
	PolicyName string
	sched.Stages
	Estimates Estimates
	// OnRound, when set, sees every round (tests, explain logs).
	OnRound func(*sched.Round)
	// Meter, when set, measures the run from outside the policy (per-queue outcomes).
	Meter Meter
	// OnCompile, when set, is told of every compilation of a job's constraints in a round
	// (sched.RoundState.OnCompile; tests check that each job is compiled once a round).
	OnCompile func(jobKey string)

	partialGangPins int
	// pinsView holds the snapshot the Wakers read after each round (reused arrays).
	pinsView sched.PinsView
	// scratch holds the arrays the pipeline reuses from round to round.
	scratch sched.Scratch
	// factors memoises each job's estimate error (Estimates.Factor) across rounds, tells
	// whether a namespace's users write estimates (EstimateReplay.PartialEstimates).
	factors map[string]float64
	tells   map[string]bool
	// primed is set once the estimates step learned the run in hindsight (Estimates.Hindsight).
	primed bool
}

// Meter measures a run from outside its policy: it sees the cluster as every round left it
// and adds what it measured to the run's result.
type Meter interface {
	Measure(snap *cluster.Snapshot)
	Report(r *Result)
}

// Name is the policy's name in results.
func (p *PipelinePolicy) Name() string { return p.PolicyName }

// NeedsOracle asks the engine for true runtimes, which the policy only ever sees through
// Estimates.
func (p *PipelinePolicy) NeedsOracle() bool { return !p.Estimates.Off }

// PartialGangPins counts the gangs the rounds pinned in part (must stay 0).
func (p *PipelinePolicy) PartialGangPins() int { return p.partialGangPins }

// round runs one pipeline round on the engine (its lock held).
func (p *PipelinePolicy) round(ctx context.Context, e *Engine) error {
	if p.factors == nil {
		p.factors = map[string]float64{}
	}
	if p.tells == nil {
		p.tells = map[string]bool{}
	}
	c := &estimating{e: e, est: p.Estimates, factors: p.factors, learn: p.Stages.Estimator, tells: p.tells}
	if p.Estimates.Hindsight && !p.primed {
		c.primeHindsight()
		p.primed = true
	}
	view := &inRound{e: e}
	o := sched.Options{UserEstimates: c.replay, Record: p.record, OnCompile: p.OnCompile}
	if p.OnRound == nil {
		o.Reuse = &p.scratch // nothing reads a round's snapshots once the next starts
	}
	r, err := sched.New(view, p.Stages, o).RunRound(ctx)
	if err != nil {
		return err
	}
	p.wake(e, r)
	if p.Meter != nil {
		p.Meter.Measure(e.snapshot())
	}
	if p.OnRound == nil {
		// Nothing outside the round saw its snapshot: the next one may reuse its arrays.
		e.recycle(view.snap)
	}
	return nil
}

// record is the pipeline's record step: it counts the gangs pinned in part and hands the
// round to OnRound.
func (p *PipelinePolicy) record(_ context.Context, r *sched.Round) {
	p.partialGangPins += r.PartialGangPins
	if p.OnRound != nil {
		p.OnRound(r)
	}
}

// wake asks for the round the time-driven stages (sched.Waker) want, after this one.
func (p *PipelinePolicy) wake(e *Engine, r *sched.Round) {
	var ws []sched.Waker
	for _, st := range []any{p.Ranker, p.Preemptor, p.Placer, p.Queues} {
		if w, ok := st.(sched.Waker); ok {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 || r.Snapshot == nil {
		return
	}
	snap := p.pinsView.After(r.Snapshot, r.Pins)
	next := math.Inf(1)
	for _, w := range ws {
		if t := w.NextRound(snap); !t.IsZero() {
			next = math.Min(next, t.Sub(e.cfg.Epoch).Seconds())
		}
	}
	e.wakeAt(next)
}

// Observe implements sched.Learner by forwarding to Learner.
func (p *PipelinePolicy) Observe(ctx context.Context, obs cluster.Observation) error {
	if p.Learner == nil {
		return nil
	}
	return p.Learner.Observe(ctx, obs)
}

// ObserveAll implements sched.BatchLearner.
func (p *PipelinePolicy) ObserveAll(ctx context.Context, obs []cluster.Observation) error {
	if p.Learner == nil {
		return nil
	}
	return sched.ObserveAll(ctx, p.Learner, obs)
}

// wakeAt asks for a round at time t (round-based stages, LAS queue demotions). It replaces
// the previous request; +Inf cancels it. Rounds also follow every arrival and completion.
func (e *Engine) wakeAt(t float64) {
	if t > e.now && !math.IsNaN(t) {
		e.wake = t
	} else if math.IsInf(t, 1) {
		e.wake = t
	}
}

var (
	_ cluster.Cluster   = (*inRound)(nil)
	_ cluster.Preempter = (*inRound)(nil)
	_ cluster.Cluster   = (*Engine)(nil)
	_ cluster.Preempter = (*Engine)(nil)
)

// --- cluster.Cluster ---

// Snapshot implements cluster.Cluster for the engine driven from outside (AdvanceTo mode).
func (e *Engine) Snapshot(ctx context.Context) (*cluster.Snapshot, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snapshot(), nil
}

// Pin implements cluster.Cluster for the engine driven from outside.
func (e *Engine) Pin(ctx context.Context, ds []cluster.Decision) ([]cluster.PinResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pin(ds), nil
}

// buildNodes renders the static part of snapshots once: nodes, device groups named as NVML
// names them, and instances "GPU-<node>-<i>" with NVLink peers on NVLink nodes.
func (e *Engine) buildNodes() []cluster.Node {
	out := make([]cluster.Node, len(e.nodes))
	for i, n := range e.nodes {
		mem := int64(n.spec.MemoryGiB * 1024)
		tdp := int64(n.spec.TDPW)
		insts := make([]cluster.Instance, len(n.gpus))
		for g := range n.gpus {
			var peers []string
			if n.interconnect == "nvlink" {
				for p := range n.gpus {
					if p != g {
						peers = append(peers, instanceID(n.id, p))
					}
				}
			}
			insts[g] = cluster.Instance{ID: instanceID(n.id, g), Healthy: true,
				PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x10+g), NVLinkPeers: peers,
				NUMANode: g * 2 / len(n.gpus), PCIeSwitch: fmt.Sprintf("pcie-%d", g/2)}
		}
		memU, tdpU := "MiB", "W"
		out[i] = cluster.Node{ID: n.id, Name: n.id, Datacenter: "sim", Pool: "default", Class: n.class,
			Status: "ready", Eligible: true,
			Attributes: map[string]string{"unique.hostname": n.id, "kernel.name": "linux",
				"driver.hetgpu": "1", "hetgpu.simulated": "true"},
			Meta: map[string]string{},
			Devices: []cluster.DeviceGroup{{Vendor: "nvidia", Type: "gpu", Name: n.gpuName, GPUType: n.gpuType,
				Attributes: map[string]cluster.Attribute{
					"memory":      {Int: &mem, Unit: memU},
					"power_limit": {Int: &tdp, Unit: tdpU},
				}, Instances: insts}},
			Interconnect: n.interconnect}
	}
	return out
}

func (e *Engine) wall(t float64) time.Time {
	return e.cfg.Epoch.Add(time.Duration(math.Round(t * float64(time.Second))))
}

func (e *Engine) snapshot() *cluster.Snapshot {
	e.compact()
	snap := &cluster.Snapshot{Now: e.wall(e.now), Nodes: e.baseNodes}
	n := 0
	for _, j := range e.running {
		n += len(e.allocsOf(j))
	}
	if n > 0 {
		snap.Running = e.spareRunning[:0]
		if cap(snap.Running) < n {
			snap.Running = make([]cluster.Alloc, 0, n+n/2)
		}
	}
	e.spareRunning = nil
	for _, j := range e.running {
		hetgpu := e.clusterJob(j).Hetgpu
		for _, a := range e.allocsOf(j) {
			a.Hetgpu = hetgpu
			snap.Running = append(snap.Running, a)
		}
	}
	slices.SortFunc(snap.Running, func(a, b cluster.Alloc) int { return strings.Compare(a.ID, b.ID) })
	// Pending and Preemptible share one array (SetJobs): one allocation, and the preemption
	// stage ranks both without a copy.
	jobs := e.spareJobs[:0]
	if n := len(e.pending) + len(e.running); cap(jobs) < n {
		jobs = make([]cluster.Job, 0, n+n/2)
	}
	e.spareJobs = nil
	for _, j := range e.pending {
		jobs = append(jobs, e.clusterJob(j))
	}
	pending := len(jobs)
	// Every simulated job checkpoints (as in Gavel's and Tiresias' simulators): a policy with a
	// preemption stage may stop any running job. Ordered by key (JobState.Key is the cluster
	// job's Key).
	running := slices.Clone(e.running)
	slices.SortFunc(running, func(a, b *JobState) int { return strings.Compare(a.Key, b.Key) })
	for _, j := range running {
		jobs = append(jobs, e.clusterJob(j))
	}
	snap.SetJobs(jobs, pending)
	return snap
}

// recycle takes back the arrays of a snapshot that nobody reads any more (the round that
// took it is over and kept nothing of it), for the next snapshot to fill.
func (e *Engine) recycle(snap *cluster.Snapshot) {
	if snap == nil {
		return
	}
	e.spareJobs = snap.Active()
	e.spareRunning = snap.Running
}

// allocsOf are a running job's allocations, one per node in node order, without Hetgpu (it
// changes as the job runs); built once per start, shared read-only by every snapshot.
func (e *Engine) allocsOf(j *JobState) []cluster.Alloc {
	if j.allocs != nil {
		return j.allocs
	}
	byNode := make(map[int][]string, 1)
	var order []int
	for _, r := range j.Placement.GPUs {
		if _, ok := byNode[r.Node]; !ok {
			order = append(order, r.Node)
		}
		// The IDs buildNodes rendered once (a start renders none).
		byNode[r.Node] = append(byNode[r.Node], e.baseNodes[r.Node].Devices[0].Instances[r.Index].ID)
	}
	sort.Ints(order)
	j.allocs = make([]cluster.Alloc, 0, len(order))
	for k, ni := range order {
		j.allocs = append(j.allocs, cluster.Alloc{ID: j.ID + "-" + strconv.Itoa(k), Namespace: j.Namespace,
			JobID: j.ID, Group: JobGroup, NodeID: e.nodes[ni].id, DeviceIDs: byNode[ni],
			GPUType: j.GPUType, StartTime: e.wall(j.segStart), Shared: j.Placement.Shared})
		j.allocs[k].RememberKey(j.Key)
	}
	return j.allocs
}

func (e *Engine) clusterJob(j *JobState) cluster.Job {
	cj := cluster.Job{Namespace: j.Namespace, ID: j.ID, Group: JobGroup, Priority: 50,
		SubmitTime: e.wall(j.ArrivalS), GPUs: j.GPUs, DeviceName: "nvidia/gpu",
		Hetgpu: cluster.Annotations{Enabled: true, ModelName: j.Model, BatchSize: j.BatchSize,
			MaxNodes: j.MaxNodes, AllowSharing: e.allowsSharing(j), Preemptible: true,
			MinThroughput: j.MinThroughput},
		AttainedGPUSeconds: j.Attained(e.now)}
	cj.RememberKey(j.Key)
	if e.cfg.Oracle && j.RefS > 0 {
		// Remaining runtime on the reference type: what an oracle user estimate would say now.
		cj.Hetgpu.EstRuntime = time.Duration(j.RefS * j.Remaining(e.now) / j.TotalSteps * float64(time.Second))
	}
	return cj
}

func (e *Engine) pin(ds []cluster.Decision) []cluster.PinResult {
	out := make([]cluster.PinResult, 0, len(ds))
	for _, d := range ds {
		j, res := e.lookup(d.JobKey(), StatusPending, "pending")
		if res.Err == nil {
			p, err := e.placementOf(d)
			// A job that allows sharing holds its GPU as shareable however it was placed,
			// as a Nomad allocation of a sharing job does.
			p.Shared = p.Shared || e.allowsSharing(j)
			if err == nil && len(p.GPUs) > 0 && e.nodes[p.GPUs[0].Node].isMIG() {
				p.Shared = false // MIG slices are never shared
			}
			if err == nil {
				var typ string
				var nodes int
				if typ, nodes, err = e.validate(j, p); err == nil {
					e.start(j, p, typ, nodes)
					res.Applied = true
				}
			}
			if err != nil {
				res.Conflict = true
				res.Err = err
			}
		}
		out = append(out, res)
	}
	return out
}

// lookup finds the job of key for a pin or a preemption, which needs it in state want: the
// result starts as that call's answer and says why not when the job does not exist (an error)
// or is in another state, named (a conflict).
func (e *Engine) lookup(key string, want Status, name string) (*JobState, cluster.PinResult) {
	res := cluster.PinResult{JobKey: key}
	j := e.byKey[key]
	switch {
	case j == nil:
		res.Err = fmt.Errorf("job %s does not exist in the simulation", key)
	case j.Status != want:
		res.Conflict = true
		res.Err = fmt.Errorf("job %s is not %s", key, name)
	}
	return j, res
}

func (e *Engine) placementOf(d cluster.Decision) (Placement, error) {
	p := Placement{Shared: d.Shared}
	for _, a := range d.Assign {
		ni, ok := e.nodeIdx[a.NodeID]
		if !ok {
			return p, fmt.Errorf("decision for %s: node %q does not exist", d.JobKey(), a.NodeID)
		}
		if want := "nvidia/gpu/" + e.nodes[ni].gpuName; a.DeviceGroup != "" && a.DeviceGroup != want {
			return p, fmt.Errorf("decision for %s: device group %q is not on node %s (it has %q)", d.JobKey(), a.DeviceGroup, a.NodeID, want)
		}
		for _, id := range a.InstanceIDs {
			r, ok := e.instIdx[id]
			if !ok || r.Node != ni {
				return p, fmt.Errorf("decision for %s: GPU %q is not on node %s", d.JobKey(), id, a.NodeID)
			}
			p.GPUs = append(p.GPUs, r)
		}
	}
	return p, nil
}

// --- running a policy ---

// Run replays the submitted jobs under a policy until every job has finished (or can never
// start), or ctx ends. progress, when set, is called with the number of finished jobs.
func (e *Engine) Run(ctx context.Context, p *PipelinePolicy, progress func(done int)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.observers = append(e.observers, p)
	lastDone := -1
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("simulation of %s stopped at t=%.0fs: %w", p.Name(), e.now, err)
		}
		next, _ := e.nextEvent()
		if math.IsInf(next, 1) {
			break
		}
		changed := e.step(next)
		if changed && (e.nPending > 0 || len(e.running) > 0) {
			waiting := e.nPending
			t0 := time.Now()
			if err := p.round(ctx, e); err != nil {
				return fmt.Errorf("policy %s at t=%.0fs: %w", p.Name(), e.now, err)
			}
			if waiting > 0 {
				e.latencies = append(e.latencies, time.Since(t0))
			}
		}
		e.sample()
		if progress != nil && e.done != lastDone {
			lastDone = e.done
			progress(e.done)
		}
	}
	e.compact()
	if len(e.pending) > 0 {
		e.log.Warn("jobs left waiting with nothing running and nothing to come",
			"policy", p.Name(), "jobs", len(e.pending))
	}
	return nil
}

// Preempt implements cluster.Preempter for the engine driven from outside.
func (e *Engine) Preempt(ctx context.Context, ps []cluster.Preemption) ([]cluster.PinResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.preemptAll(ps), nil
}

func (e *Engine) preemptAll(ps []cluster.Preemption) []cluster.PinResult {
	// The runs these preemptions end reach the learners in one call: a predictor then
	// rebuilds once, not once per job.
	var batch []cluster.Observation
	e.batch = &batch
	defer func() {
		e.batch = nil
		e.deliver(batch)
	}()
	out := make([]cluster.PinResult, 0, len(ps))
	for _, p := range ps {
		j, res := e.lookup(p.JobKey(), StatusRunning, "running")
		if res.Err == nil {
			if err := e.preempt(j); err != nil {
				res.Err = err
			} else {
				res.Applied = true
			}
		}
		out = append(out, res)
	}
	return out
}
