// Package sim is hetgpu's trace-driven simulator of heterogeneous GPU clusters. The Engine is a
// backend of cluster.Cluster, so the production scheduling pipeline (sched.Pipeline: rank ->
// predict -> place -> pin) runs against it unchanged; native baselines (fifo, sjf, tiresias,
// gavel) use the richer State API, including a sim-only preemption hook.
//
// Model (all times in simulated seconds):
//   - Events: job arrivals, job completions and policy wake-ups. Events at the same instant are
//     applied together, then the policy gets one scheduling round (when jobs are waiting or it
//     asked to be woken).
//   - Speed: a job on n GPUs of type g runs at the throughput table's steps/s for (job type, g,
//     n) (sidecar/throughput: measured, else its documented fallbacks). A placement spanning
//     several nodes runs at Gavel's measured unconsolidated throughput where it exists (capped at
//     the consolidated one), else at the consolidated throughput x the spec's
//     cross_node_efficiency (default 0.75). Two jobs sharing GPUs (co-location) each run at the
//     table's pair throughputs; a pair the table lacks is time-sliced (each at half speed). A
//     measured 0 (out of memory) makes the configuration infeasible: it is never started.
//   - Power: each GPU draws gpuspec.Spec.Power(util, alpha) = idle + (TDP - idle) x util^alpha.
//     An idle GPU has util 0. A job contributes util = busy_util x its multi-GPU scaling
//     efficiency (throughput on n GPUs / (n x throughput on 1), at most 1) x its slowdown
//     (actual rate / rate it would have alone on one node) to each of its GPUs; a GPU's util is
//     the sum over its jobs, at most 1. Defaults: alpha 0.7, busy_util 0.9 (cluster spec
//     `power` block). Energy integrates the power of every GPU, busy or idle, from the first
//     arrival to the last completion; SimulateAll then extends each policy's figure at idle
//     power to the last completion of any policy it ran (CommonEnergyWindow), so that a
//     policy whose last job ends early is not credited with the idle time it leaves.
//   - Preemption (State.Preempt) returns a job to the queue with its progress kept; its next
//     start loses Config.RestartPenaltyS seconds of work (default 0, as in Gavel's simulator).
package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/throughput"
	"github.com/hetgpu/hetgpu/sidecar/trace"
)

// DefaultEpoch is the wall-clock time of simulated second 0 in snapshots.
var DefaultEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// JobGroup is the task group name simulated jobs get in snapshots and decisions.
const JobGroup = "train"

// Config configures an Engine.
type Config struct {
	Spec       *Spec
	Throughput *throughput.Table
	// GPUSpecs defaults to gpuspec.Default().
	GPUSpecs *gpuspec.Table
	// Oracle lets snapshots carry each job's true runtime (Annotations.EstRuntime, on
	// gpuspec.ReferenceGPU): only for policies that are allowed oracle information (sjf).
	Oracle bool
	// RestartPenaltyS is work (in seconds at the new rate) lost each time a preempted job
	// restarts.
	RestartPenaltyS float64
	// Epoch is the wall time of simulated second 0 (DefaultEpoch when zero).
	Epoch  time.Time
	Logger hclog.Logger
	// NoSeries skips the time series (benchmarks).
	NoSeries bool
}

// Status is a job's state.
type Status int

const (
	StatusFuture Status = iota // submitted, arrival in the future
	StatusPending
	StatusRunning
	StatusDone
	// StatusUnschedulable: no GPU type of the cluster can ever run the job (too many GPUs for
	// the type, or out of memory everywhere).
	StatusUnschedulable
)

// GPURef names one GPU: node index and GPU index within the node.
type GPURef struct{ Node, Index int }

// Placement is where a native policy starts a job: exactly Job.GPUs GPUs of one type.
type Placement struct {
	GPUs []GPURef
	// Shared allows GPUs already held by one other shared job (co-location).
	Shared bool
}

// JobState is a job in the engine. Policies read it; only the engine writes it.
type JobState struct {
	trace.Job
	// Key is "namespace/id/group", as cluster.Job.Key.
	Key    string
	Seq    int
	Status Status
	// MaxNodes is how many nodes the job may span (1 unless it needs more GPUs than the
	// largest node has).
	MaxNodes int
	// FirstStart is the first start time (NaN before), Finish the completion time.
	FirstStart, Finish float64
	Preemptions        int
	// Placement, GPUType and Nodes describe the current allocation while running.
	Placement Placement
	GPUType   string
	Nodes     int
	// Rate is the current speed in steps/s while running.
	Rate float64
	// IdealS is the runtime alone on the best GPU type of the cluster; RefS on gpuspec.ReferenceGPU.
	IdealS, RefS float64
	// RefGPUHours is the job's work in gpuspec.ReferenceGPU GPU-hours (RefS x GPUs / 3600).
	RefGPUHours float64

	remaining  float64 // steps left, as of lastUpdate
	attained   float64 // GPU-seconds received, as of lastUpdate
	runTime    float64 // seconds spent running, as of lastUpdate
	energyJ    float64 // as of lastUpdate
	powerW     float64 // current power share while running
	util       float64 // util contribution per GPU while running
	lastUpdate float64
	heapIdx    int
	runIdx     int
	segStart   float64 // start of the current allocation
	segSteps   float64 // remaining at segment start
	segEnergy  float64
	coRunner   string
	coBatch    int
	lastType   string
}

// Remaining returns the steps left at the engine's current time.
func (j *JobState) Remaining(now float64) float64 {
	if j.Status != StatusRunning {
		return j.remaining
	}
	return math.Max(0, j.remaining-j.Rate*(now-j.lastUpdate))
}

// Attained returns the GPU-seconds the job has received up to now (least-attained-service).
func (j *JobState) Attained(now float64) float64 {
	if j.Status != StatusRunning {
		return j.attained
	}
	return j.attained + float64(j.GPUs)*(now-j.lastUpdate)
}

// RunTime returns the seconds the job has run up to now.
func (j *JobState) RunTime(now float64) float64 {
	if j.Status != StatusRunning {
		return j.runTime
	}
	return j.runTime + (now - j.lastUpdate)
}

type gpuSlot struct {
	holders [2]*JobState
	n       int
	util    float64
	powerW  float64
}

type simNode struct {
	id, class, gpuType, gpuName, interconnect string
	spec                                      gpuspec.Spec
	gpus                                      []gpuSlot
	free                                      int
}

type rateKey struct {
	jobType, gpuType string
	gpus             int
	spread           bool
}

// Sample is one point of the time series.
type Sample struct {
	T        float64
	BusyGPUs int
	Queue    int
	Running  int
	PowerW   float64
}

// Engine is the simulated cluster. Its exported methods are safe for concurrent use; Run drives
// it with a Policy, or an outside scheduler drives it through Submit, AdvanceTo, Snapshot and Pin
// (accelerated wall-clock mode for `hetgpu sidecar` without Nomad).
type Engine struct {
	mu  sync.Mutex
	cfg Config
	log hclog.Logger

	nodes          []*simNode
	nodeIdx        map[string]int
	instIdx        map[string]GPURef
	classMaxPerNod map[string]int // per GPU type: largest node
	typeTotal      map[string]int
	maxPerNode     int
	totalGPUs      int
	baseNodes      []cluster.Node

	jobs         []*JobState
	byKey        map[string]*JobState
	future       futureHeap
	pending      []*JobState // arrival order (Seq); may hold started jobs until compacted
	pendingDirty bool
	nPending     int
	running      []*JobState
	completions  complHeap
	wake         float64 // requested scheduling round (+Inf: none)
	done         int
	unschedulble int

	now, firstArrival, lastFinish float64
	started                       bool
	acctT                         float64
	powerW                        float64
	busyGPUs                      int
	energyJ, busyGPUSeconds       float64
	energyAtFinish, busyAtFinish  float64
	idleW                         float64 // the whole cluster's draw with every GPU idle

	rates     map[rateKey]float64
	latencies []time.Duration
	series    []Sample
	observers []sched.Learner
	// batch, while set, collects observations to deliver together (preemptions of a round).
	batch *[]cluster.Observation
}

// New builds an engine with no jobs.
func New(cfg Config) (*Engine, error) {
	if cfg.Spec == nil {
		return nil, fmt.Errorf("sim: Config.Spec is nil")
	}
	if cfg.Throughput == nil {
		return nil, fmt.Errorf("sim: Config.Throughput is nil")
	}
	if cfg.GPUSpecs == nil {
		cfg.GPUSpecs = gpuspec.Default()
	}
	if cfg.Epoch.IsZero() {
		cfg.Epoch = DefaultEpoch
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, nodeIdx: map[string]int{}, instIdx: map[string]GPURef{},
		classMaxPerNod: map[string]int{}, typeTotal: map[string]int{}, byKey: map[string]*JobState{},
		rates: map[rateKey]float64{}, firstArrival: math.NaN(), wake: math.Inf(1)}
	for _, c := range cfg.Spec.Classes {
		sp, ok := gpuSpecOf(cfg.GPUSpecs, c.GPUType)
		if !ok {
			return nil, fmt.Errorf("sim: node class %s: no datasheet for GPU type %q", c.Name, c.GPUType)
		}
		for i := 0; i < c.Count; i++ {
			n := &simNode{id: fmt.Sprintf("%s-%d", c.Name, i), class: c.Name, gpuType: c.GPUType, gpuName: c.GPUName,
				interconnect: c.Interconnect, spec: sp, gpus: make([]gpuSlot, c.GPUsPerNode), free: c.GPUsPerNode}
			if _, dup := e.nodeIdx[n.id]; dup {
				return nil, fmt.Errorf("sim: node ID %s is not unique (node class names must not end in -<number>)", n.id)
			}
			e.nodeIdx[n.id] = len(e.nodes)
			for g := range n.gpus {
				n.gpus[g].powerW = sp.IdleW
				e.instIdx[instanceID(n.id, g)] = GPURef{len(e.nodes), g}
			}
			e.nodes = append(e.nodes, n)
			e.powerW += sp.IdleW * float64(c.GPUsPerNode)
		}
		e.classMaxPerNod[c.GPUType] = max(e.classMaxPerNod[c.GPUType], c.GPUsPerNode)
		e.typeTotal[c.GPUType] += c.GPUsPerNode * c.Count
		e.maxPerNode = max(e.maxPerNode, c.GPUsPerNode)
		e.totalGPUs += c.GPUsPerNode * c.Count
	}
	e.idleW = e.powerW
	e.baseNodes = e.buildNodes()
	return e, nil
}

func instanceID(node string, i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }

// Spec returns the cluster spec.
func (e *Engine) Spec() *Spec { return e.cfg.Spec }

// AddObserver registers a learner that receives one cluster.Observation per finished
// allocation (a job's run on one placement, ended by completion or preemption).
func (e *Engine) AddObserver(l sched.Learner) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.observers = append(e.observers, l)
}

// rate is the isolated steps/s of a job type on n GPUs of a type, consolidated or spread; 0 when
// infeasible or unknown.
func (e *Engine) rate(jobType, gpuType string, n int, spread bool) float64 {
	k := rateKey{jobType, gpuType, n, spread}
	if v, ok := e.rates[k]; ok {
		return v
	}
	v, _, ok := e.cfg.Throughput.Throughput(jobType, gpuType, n)
	if mv, mig := e.migRate(jobType, gpuType, n); mig {
		v, ok = mv, true
	}
	if !ok || !(v > 0) {
		v = 0
	}
	if spread && v > 0 {
		if u, ok := e.cfg.Throughput.Unconsolidated(jobType, gpuType, n); ok && u > 0 {
			v = math.Min(u, v)
		} else {
			v *= e.cfg.Spec.Network.CrossNodeEfficiency
		}
	}
	e.rates[k] = v
	return v
}

// Rate is the oracle throughput (steps/s) of a job on gpus GPUs of gpuType spread over nodes
// nodes, alone; 0 when it cannot run there.
func (e *Engine) Rate(j *JobState, gpuType string, gpus, nodes int) float64 {
	return e.rate(j.JobType, gpuType, gpus, nodes > 1)
}

// minNodes is the fewest nodes of a type that hold n GPUs, or 0 if the type cannot host n.
func (e *Engine) minNodes(gpuType string, n int) int {
	per := e.classMaxPerNod[gpuType]
	if per == 0 || e.typeTotal[gpuType] < n {
		return 0
	}
	return (n + per - 1) / per
}

// Submit adds jobs; arrivals in the past are moved to now. Jobs no GPU type can run are marked
// unschedulable and counted. IDs must be unique.
func (e *Engine) Submit(jobs ...trace.Job) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.submit(jobs)
}

func (e *Engine) submit(jobs []trace.Job) error {
	for _, tj := range jobs {
		ns := tj.Namespace
		if ns == "" {
			ns = "default"
		}
		key := cluster.GroupKey(ns, tj.ID, JobGroup)
		if _, dup := e.byKey[key]; dup {
			return fmt.Errorf("sim: job %s submitted twice", key)
		}
		if tj.GPUs <= 0 || !(tj.TotalSteps > 0) {
			return fmt.Errorf("sim: job %s: gpus = %d, total_steps = %v, expected both positive (resolve durations with trace.ResolveWork)", key, tj.GPUs, tj.TotalSteps)
		}
		if tj.ArrivalS < e.now {
			tj.ArrivalS = e.now
		}
		j := &JobState{Job: tj, Key: key, Seq: len(e.jobs), FirstStart: math.NaN(), Finish: math.NaN(),
			remaining: tj.TotalSteps, heapIdx: -1, runIdx: -1}
		j.Namespace = ns
		j.MaxNodes = max(1, (tj.GPUs+e.maxPerNode-1)/e.maxPerNode)
		best := 0.0
		for _, g := range e.cfg.Spec.GPUTypes() {
			k := e.minNodes(g, tj.GPUs)
			if k == 0 || k > j.MaxNodes {
				continue
			}
			best = math.Max(best, e.rate(tj.JobType, g, tj.GPUs, k > 1))
		}
		if ref := e.rate(tj.JobType, gpuspec.ReferenceGPU, tj.GPUs, false); ref > 0 {
			j.RefS = tj.TotalSteps / ref
			j.RefGPUHours = j.RefS * float64(tj.GPUs) / 3600
		}
		e.jobs = append(e.jobs, j)
		e.byKey[key] = j
		if best == 0 {
			j.Status = StatusUnschedulable
			e.unschedulble++
			e.log.Debug("job can never run on this cluster", "job", key, "type", tj.JobType, "gpus", tj.GPUs)
			continue
		}
		j.IdealS = tj.TotalSteps / best
		heap.Push(&e.future, j)
	}
	return nil
}

// Now returns the simulated time in seconds.
func (e *Engine) Now() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// Done reports whether every schedulable job has finished.
func (e *Engine) Done() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.future.Len() == 0 && e.nPending == 0 && len(e.running) == 0
}

// NextEvent returns the time of the next arrival or completion (+Inf when none).
func (e *Engine) NextEvent() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, _ := e.nextEvent()
	return t
}

func (e *Engine) nextEvent() (float64, bool) {
	t := math.Inf(1)
	wake := false
	if e.future.Len() > 0 {
		t = e.future[0].ArrivalS
	}
	if e.completions.Len() > 0 {
		t = math.Min(t, e.completions[0].finishAt())
	}
	if e.wake <= t {
		t, wake = e.wake, true
	}
	return t, wake
}

// AdvanceTo processes every event up to time t (no scheduling rounds: an outside scheduler
// decides through Snapshot and Pin) and sets the clock to t.
func (e *Engine) AdvanceTo(t float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		next, _ := e.nextEvent()
		if next > t {
			break
		}
		e.step(next)
	}
	if t > e.now {
		e.advance(t)
	}
}

// advance moves the clock, integrating energy and busy GPU time.
func (e *Engine) advance(t float64) {
	if t < e.now {
		return
	}
	if e.started {
		dt := t - e.acctT
		e.energyJ += e.powerW * dt
		e.busyGPUSeconds += float64(e.busyGPUs) * dt
		e.acctT = t
	}
	e.now = t
}

// step advances to t and applies every completion, arrival and wake-up due at t. It reports
// whether anything happened.
func (e *Engine) step(t float64) bool {
	e.advance(t)
	changed := false
	eps := 1e-9 * math.Max(1, math.Abs(t))
	for e.completions.Len() > 0 && e.completions[0].finishAt() <= t+eps {
		j := heap.Pop(&e.completions).(*JobState)
		e.complete(j)
		changed = true
	}
	for e.future.Len() > 0 && e.future[0].ArrivalS <= t+eps {
		j := heap.Pop(&e.future).(*JobState)
		if !e.started {
			e.started, e.acctT, e.firstArrival = true, t, t
		}
		j.Status = StatusPending
		e.pending = append(e.pending, j)
		if len(e.pending) > 1 && e.pending[len(e.pending)-2].Seq > j.Seq {
			sort.SliceStable(e.pending, func(a, b int) bool { return e.pending[a].Seq < e.pending[b].Seq })
		}
		e.nPending++
		changed = true
	}
	if e.wake <= t+eps {
		e.wake = math.Inf(1)
		changed = true
	}
	return changed
}

func (j *JobState) finishAt() float64 {
	if j.Rate <= 0 {
		return math.Inf(1)
	}
	return j.lastUpdate + j.remaining/j.Rate
}

// settle brings a running job's lazy counters up to now.
func (e *Engine) settle(j *JobState) {
	dt := e.now - j.lastUpdate
	if j.Status == StatusRunning && dt > 0 {
		j.remaining = math.Max(0, j.remaining-j.Rate*dt)
		j.attained += float64(j.GPUs) * dt
		j.runTime += dt
		j.energyJ += j.powerW * dt
	}
	j.lastUpdate = e.now
}

func (e *Engine) complete(j *JobState) {
	e.settle(j)
	j.remaining = 0
	e.release(j)
	j.Status = StatusDone
	j.Finish = e.now
	e.lastFinish = e.now
	e.energyAtFinish, e.busyAtFinish = e.energyJ, e.busyGPUSeconds
	e.done++
}

// Validate checks that a native placement is legal for the job; it returns the GPU type.
func (e *Engine) validate(j *JobState, p Placement) (string, int, error) {
	if j.Status != StatusPending {
		return "", 0, fmt.Errorf("job %s is not pending", j.Key)
	}
	if len(p.GPUs) != j.GPUs {
		return "", 0, fmt.Errorf("job %s needs %d GPUs, placement has %d", j.Key, j.GPUs, len(p.GPUs))
	}
	typ := ""
	nodes := map[int]bool{}
	seen := map[GPURef]bool{}
	for _, r := range p.GPUs {
		if r.Node < 0 || r.Node >= len(e.nodes) || r.Index < 0 || r.Index >= len(e.nodes[r.Node].gpus) {
			return "", 0, fmt.Errorf("job %s: GPU %v does not exist", j.Key, r)
		}
		if seen[r] {
			return "", 0, fmt.Errorf("job %s: GPU %s listed twice", j.Key, instanceID(e.nodes[r.Node].id, r.Index))
		}
		seen[r] = true
		n := e.nodes[r.Node]
		if typ == "" {
			typ = n.gpuType
		} else if typ != n.gpuType {
			return "", 0, fmt.Errorf("job %s: placement mixes GPU types %s and %s", j.Key, typ, n.gpuType)
		}
		s := &n.gpus[r.Index]
		switch {
		case s.n == 0:
		case s.n == 1 && p.Shared && s.holders[0].Placement.Shared && !n.isMIG():
			if e.pairOOM(j, s.holders[0], n.gpuType) {
				return "", 0, fmt.Errorf("job %s cannot share GPU %s with %s: the pair runs out of memory", j.Key, instanceID(n.id, r.Index), s.holders[0].Key)
			}
		default:
			return "", 0, fmt.Errorf("job %s: GPU %s is in use", j.Key, instanceID(n.id, r.Index))
		}
		nodes[r.Node] = true
	}
	if len(nodes) > j.MaxNodes {
		return "", 0, fmt.Errorf("job %s may span %d node(s), placement spans %d", j.Key, j.MaxNodes, len(nodes))
	}
	if e.rate(j.JobType, typ, j.GPUs, len(nodes) > 1) <= 0 {
		return "", 0, fmt.Errorf("job %s (%s) cannot run on %d x %s (out of memory or no throughput)", j.Key, j.JobType, j.GPUs, typ)
	}
	return typ, len(nodes), nil
}

// start puts a pending job on a validated placement.
func (e *Engine) start(j *JobState, p Placement, typ string, nodes int) {
	j.Placement = Placement{GPUs: append([]GPURef(nil), p.GPUs...), Shared: p.Shared}
	j.GPUType, j.Nodes, j.lastType = typ, nodes, typ
	j.Status = StatusRunning
	j.lastUpdate = e.now
	if math.IsNaN(j.FirstStart) {
		j.FirstStart = e.now
	} else if e.cfg.RestartPenaltyS > 0 {
		// Lost work: the penalty in seconds at the new consolidated rate.
		j.remaining = math.Min(j.TotalSteps, j.remaining+e.cfg.RestartPenaltyS*e.rate(j.JobType, typ, j.GPUs, nodes > 1))
	}
	j.segStart, j.segSteps, j.segEnergy, j.coRunner = e.now, j.remaining, j.energyJ, ""
	partners := map[*JobState]bool{}
	for _, r := range j.Placement.GPUs {
		n := e.nodes[r.Node]
		s := &n.gpus[r.Index]
		if s.n == 0 {
			n.free--
			e.busyGPUs++
		} else {
			partners[s.holders[0]] = true
		}
		s.holders[s.n] = j
		s.n++
	}
	j.runIdx = len(e.running)
	e.running = append(e.running, j)
	e.nPending--
	e.pendingDirty = true
	e.refresh(j)
	for p := range partners {
		e.settle(p)
		e.refresh(p)
	}
	e.updatePower(j)
	for p := range partners {
		e.updatePower(p)
	}
}

// release frees a job's GPUs and updates partners.
func (e *Engine) release(j *JobState) {
	e.emitObservation(j)
	partners := map[*JobState]bool{}
	touched := make([]GPURef, 0, len(j.Placement.GPUs))
	for _, r := range j.Placement.GPUs {
		n := e.nodes[r.Node]
		s := &n.gpus[r.Index]
		if s.holders[0] == j {
			s.holders[0], s.holders[1] = s.holders[1], nil
		} else {
			s.holders[1] = nil
		}
		s.n--
		if s.n == 0 {
			n.free++
			e.busyGPUs--
		} else {
			partners[s.holders[0]] = true
		}
		touched = append(touched, r)
	}
	if j.heapIdx >= 0 {
		heap.Remove(&e.completions, j.heapIdx)
	}
	last := e.running[len(e.running)-1]
	e.running[j.runIdx] = last
	last.runIdx = j.runIdx
	e.running = e.running[:len(e.running)-1]
	j.runIdx = -1
	j.Rate, j.powerW, j.util = 0, 0, 0
	for p := range partners {
		e.settle(p)
		e.refresh(p)
	}
	for _, r := range touched {
		e.gpuPower(r)
	}
	for p := range partners {
		e.updatePower(p)
	}
}

// refresh recomputes a running job's rate and util contribution from its placement and
// partners, and repositions it in the completion heap.
func (e *Engine) refresh(j *JobState) {
	spread := j.Nodes > 1
	base := e.rate(j.JobType, j.GPUType, j.GPUs, spread)
	factor := 1.0
	for _, r := range j.Placement.GPUs {
		s := &e.nodes[r.Node].gpus[r.Index]
		if s.n < 2 {
			continue
		}
		other := s.holders[0]
		if other == j {
			other = s.holders[1]
		}
		f := 0.5
		if a, _, ok := e.cfg.Throughput.Colocated(j.GPUType, j.JobType, j.GPUs, other.JobType, other.GPUs); ok {
			if iso, ok := e.cfg.Throughput.Measured(j.JobType, j.GPUType, j.GPUs); ok && iso > 0 {
				f = a / iso
			}
		}
		if f < factor {
			factor = f
			j.coRunner, j.coBatch = other.Model, other.BatchSize
		}
	}
	j.Rate = base * factor
	cons := e.rate(j.JobType, j.GPUType, j.GPUs, false)
	one := e.rate(j.JobType, j.GPUType, 1, false)
	eff := 1.0
	if one > 0 && j.GPUs > 1 {
		eff = math.Min(1, cons/(float64(j.GPUs)*one))
	}
	slow := 1.0
	if cons > 0 {
		slow = math.Min(1, j.Rate/cons)
	}
	j.util = e.cfg.Spec.Power.BusyUtil * eff * slow
	if j.heapIdx >= 0 {
		heap.Fix(&e.completions, j.heapIdx)
	} else {
		heap.Push(&e.completions, j)
	}
}

// updatePower recomputes the power of a job's GPUs and its own power share.
func (e *Engine) updatePower(j *JobState) {
	for _, r := range j.Placement.GPUs {
		e.gpuPower(r)
	}
	p := 0.0
	for _, r := range j.Placement.GPUs {
		s := &e.nodes[r.Node].gpus[r.Index]
		p += s.powerW / float64(s.n)
	}
	j.powerW = p
}

func (e *Engine) gpuPower(r GPURef) {
	n := e.nodes[r.Node]
	s := &n.gpus[r.Index]
	u := 0.0
	for i := 0; i < s.n; i++ {
		u += s.holders[i].util
	}
	u = math.Min(1, u)
	w := n.spec.Power(u, e.cfg.Spec.Power.Alpha)
	e.powerW += w - s.powerW
	s.util, s.powerW = u, w
	// Partners' power shares change with the GPU's power.
	for i := 0; i < s.n; i++ {
		h := s.holders[i]
		if h.Status == StatusRunning {
			e.settle(h)
			p := 0.0
			for _, rr := range h.Placement.GPUs {
				ss := &e.nodes[rr.Node].gpus[rr.Index]
				if ss.n > 0 {
					p += ss.powerW / float64(ss.n)
				}
			}
			h.powerW = p
		}
	}
}

// preempt stops a running job and returns it to the queue.
func (e *Engine) preempt(j *JobState) error {
	if j.Status != StatusRunning {
		return fmt.Errorf("job %s is not running", j.Key)
	}
	e.settle(j)
	e.release(j)
	j.Status = StatusPending
	j.Preemptions++
	j.Placement, j.GPUType, j.Nodes = Placement{}, "", 0
	i := sort.Search(len(e.pending), func(i int) bool { return e.pending[i].Seq >= j.Seq })
	if i < len(e.pending) && e.pending[i] == j {
		// Still in the (uncompacted) queue from before it started.
	} else {
		e.pending = append(e.pending, nil)
		copy(e.pending[i+1:], e.pending[i:])
		e.pending[i] = j
	}
	e.nPending++
	return nil
}

func (e *Engine) emitObservation(j *JobState) {
	if len(e.observers) == 0 {
		return
	}
	dur := e.now - j.segStart
	if dur <= 0 {
		return
	}
	steps := j.segSteps - j.remaining
	n := e.nodes[j.Placement.GPUs[0].Node]
	obs := cluster.Observation{Namespace: j.Namespace, JobID: j.ID, Group: JobGroup, Task: JobGroup,
		ModelName: j.Model, BatchSize: j.BatchSize, GPUType: j.GPUType, GPUName: n.gpuName, GPUs: j.GPUs,
		Nodes: j.Nodes, Throughput: steps / dur, EnergyJ: j.energyJ - j.segEnergy,
		AvgPowerW: (j.energyJ - j.segEnergy) / dur, RuntimeS: dur, CoRunner: j.coRunner, CoRunnerBatchSize: j.coBatch,
		Time: e.cfg.Epoch.Add(time.Duration(e.now * float64(time.Second)))}
	if e.batch != nil {
		*e.batch = append(*e.batch, obs)
		return
	}
	for _, o := range e.observers {
		if err := o.Observe(context.Background(), obs); err != nil {
			e.log.Warn("observer rejected an observation", "job", j.Key, "error", err)
		}
	}
}

// deliver gives the observers the runs collected while e.batch was set, in one call each.
func (e *Engine) deliver(obs []cluster.Observation) {
	if len(obs) == 0 {
		return
	}
	for _, o := range e.observers {
		if err := sched.ObserveAll(context.Background(), o, obs); err != nil {
			e.log.Warn("observer rejected observations", "runs", len(obs), "error", err)
		}
	}
}

// compact drops started jobs from the pending queue.
func (e *Engine) compact() {
	if !e.pendingDirty {
		return
	}
	out := e.pending[:0]
	for _, j := range e.pending {
		if j.Status == StatusPending {
			out = append(out, j)
		}
	}
	for i := len(out); i < len(e.pending); i++ {
		e.pending[i] = nil
	}
	e.pending = out
	e.pendingDirty = false
}

func (e *Engine) sample() {
	if e.cfg.NoSeries || !e.started {
		return
	}
	s := Sample{T: e.now, BusyGPUs: e.busyGPUs, Queue: e.nPending, Running: len(e.running), PowerW: e.powerW}
	if k := len(e.series); k > 0 && e.series[k-1].T == s.T {
		e.series[k-1] = s
		return
	}
	e.series = append(e.series, s)
}

// --- heaps ---

type futureHeap []*JobState

func (h futureHeap) Len() int { return len(h) }
func (h futureHeap) Less(a, b int) bool {
	if h[a].ArrivalS != h[b].ArrivalS {
		return h[a].ArrivalS < h[b].ArrivalS
	}
	return h[a].Seq < h[b].Seq
}
func (h futureHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *futureHeap) Push(x any)   { *h = append(*h, x.(*JobState)) }
func (h *futureHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type complHeap []*JobState

func (h complHeap) Len() int { return len(h) }
func (h complHeap) Less(a, b int) bool {
	fa, fb := h[a].finishAt(), h[b].finishAt()
	if fa != fb {
		return fa < fb
	}
	return h[a].Seq < h[b].Seq
}
func (h complHeap) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].heapIdx, h[b].heapIdx = a, b
}
func (h *complHeap) Push(x any) {
	j := x.(*JobState)
	j.heapIdx = len(*h)
	*h = append(*h, j)
}
func (h *complHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	x.heapIdx = -1
	*h = old[:len(old)-1]
	return x
}
