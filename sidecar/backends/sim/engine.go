// Package sim is hetgpu's trace-driven simulator of heterogeneous GPU clusters. The Engine is a
// backend of cluster.Cluster and cluster.Preempter with a clock, and nothing more: every
// policy, the baselines included, is a sched.Pipeline that runs against it unchanged
// (PipelinePolicy), the code the live sidecar runs against Nomad.
//
// Model (all times in simulated seconds):
//   - Events: job arrivals, job completions and policy wake-ups. Events at the same instant are
//     applied together, then the policy gets one scheduling round (when jobs are waiting or a
//     stage asked to be woken, sched.Waker).
//   - Speed: a job on n GPUs of type g runs at the throughput table's steps/s for (job type, g,
//     n) (model/throughput: measured, else its documented fallbacks). A placement spanning
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
//   - Preemption (cluster.Preempter) returns a job to the queue with its progress kept; its next
//     start loses Config.RestartPenaltyS seconds of work (default 0, as in Gavel's simulator).
package sim

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/estimates"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/sched"
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
	// EstimateReplay says how the runtime estimates of policies that see noisy ones are
	// replayed.
	EstimateReplay
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

// Placement is where a decision starts a job: exactly Job.GPUs GPUs of one type.
type Placement struct {
	GPUs []GPURef
	// Shared allows GPUs already held by one other shared job (co-location).
	Shared bool
}

// JobState is a job in the engine; only the engine writes it (policies see cluster.Job in snapshots).
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
	allocs     []cluster.Alloc // snapshot allocations of the current placement (allocsOf)
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

	// calib learns the live estimates' models (Config.CalibrateEstimates) from finished, the
	// jobs done in order, up to calibrated; the policy's estimates step learns runtimes from
	// them up to historied.
	calib      *estimates.Set
	finished   []*JobState
	calibrated int
	historied  int
	// namespaces is how many namespaces the jobs submitted so far come from (at most 2 counted:
	// partial estimates are per namespace, or per job in a trace with one).
	namespaces int
	firstNS    string

	nodes          []*simNode
	nodeIdx        map[string]int
	instIdx        map[string]GPURef
	classMaxPerNod map[string]int // per GPU type: largest node
	typeTotal      map[string]int
	maxPerNode     int
	totalGPUs      int
	baseNodes      []cluster.Node
	// spareJobs and spareRunning are the arrays of a snapshot done with (recycle).
	spareJobs    []cluster.Job
	spareRunning []cluster.Alloc

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
	if err := cfg.EstimateReplay.Validate(); err != nil {
		return nil, err
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
		if err := e.addClass(c); err != nil {
			return nil, err
		}
	}
	e.idleW = e.powerW
	e.baseNodes = e.buildNodes()
	if cfg.LiveEstimates && cfg.CalibrateEstimates {
		cal, err := estimates.NewSet(estimates.Config{Prior: cluster.EstimateModel{Sigma: cfg.EstimateError}})
		if err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		e.calib = cal
	}
	return e, nil
}

// addClass adds a node class's nodes with idle GPUs and counts its capacity.
func (e *Engine) addClass(c NodeClass) error {
	sp, ok := gpuSpecOf(e.cfg.GPUSpecs, c.GPUType)
	if !ok {
		return fmt.Errorf("sim: node class %s: no datasheet for GPU type %q", c.Name, c.GPUType)
	}
	for i := 0; i < c.Count; i++ {
		n := &simNode{id: fmt.Sprintf("%s-%d", c.Name, i), class: c.Name, gpuType: c.GPUType, gpuName: c.GPUName,
			interconnect: c.Interconnect, spec: sp, gpus: make([]gpuSlot, c.GPUsPerNode), free: c.GPUsPerNode}
		if _, dup := e.nodeIdx[n.id]; dup {
			return fmt.Errorf("sim: node ID %s is not unique (node class names must not end in -<number>)", n.id)
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
	return nil
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
