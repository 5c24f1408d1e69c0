// Package cluster holds the snapshot every scheduling round works on and the Cluster interface
// that both backends implement: Nomad (sidecar/backends/nomad) and the trace-driven simulator
// (sidecar/backends/sim). Keeping one model means the simulator drives exactly the code that runs in
// production.
package cluster

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Cluster is a backend the scheduling pipeline reads from and writes decisions to.
type Cluster interface {
	// Snapshot returns a consistent, immutable view of nodes, devices, running allocations and
	// the jobs waiting for a decision. Callers must not modify it.
	Snapshot(ctx context.Context) (*Snapshot, error)
	// Pin commits decisions: Nomad re-registers the jobs pinned to nodes and GPU IDs, the
	// simulator starts them. A decision that cannot be applied (conflict, job gone) is
	// reported in the returned results, not as an error; the error is for backend failure.
	Pin(ctx context.Context, decisions []Decision) ([]PinResult, error)
}

// Preempter is a backend that can stop running jobs and return them to hetgpu's queue
// (Nomad: re-hold the pinned group, which stops its allocations; the simulator: preempt with
// progress kept). Only jobs the snapshot lists in Preemptible may be preempted.
type Preempter interface {
	Preempt(ctx context.Context, ps []Preemption) ([]PinResult, error)
}

// Preemption asks a backend to stop one running job and queue it again.
type Preemption struct {
	Namespace string
	JobID     string
	Group     string
	// Reason is shown to the user (job UI, logs): which job needed the GPUs, or where the job
	// moves to.
	Reason string
	// Relocated marks a job within its queue's guarantee stopped to make room for another
	// queue's job: it is to be placed again in the same round (Tenancy.Relocated).
	Relocated bool
}

// JobKey returns the Key of the preempted job.
func (p *Preemption) JobKey() string { return GroupKey(p.Namespace, p.JobID, p.Group) }

// Snapshot is the state of the cluster at one instant.
type Snapshot struct {
	// Now is the backend's clock: wall time for Nomad, simulated time in the simulator.
	Now     time.Time
	Nodes   []Node
	Running []Alloc
	// Pending holds the jobs waiting for hetgpu, oldest submission first.
	Pending []Job
	// Preemptible holds the running jobs that may be stopped and placed again (annotation
	// hetgpu.preemptible; every job in the simulator), with their attained GPU time and, as
	// EstRuntime, the estimated time they still need. Their GPUs are in Running.
	Preemptible []Job
	// Caps are this round's limits on the GPUs groups of namespaces hold (queue maxima and
	// the reserves of queue guarantees, see sidecar/stages/queue); every placement path honours
	// them. Nil without queues.
	Caps []GPUCap
	// Tenancy, set by the queue stage, says which preemptible running groups hold GPUs within
	// their queue's guarantee: a preemption may stop those only for a job of the same queue
	// (or to move them to faster GPUs). Nil without queues.
	Tenancy *Tenancy

	// free is the free-capacity index Indexed built (see Free).
	free *freeMemo
	// jobs, when SetJobs built Pending and Preemptible, is the one array of both (Active).
	jobs []Job
}

// Tenancy maps namespaces to queues and names the running groups within their queue's
// guarantee.
type Tenancy struct {
	// Queue is the queue of each namespace a queue lists; others are in DefaultQueue.
	Queue        map[string]string
	DefaultQueue string
	// Guaranteed holds the job keys ("namespace/id/group") of preemptible running groups that
	// hold GPUs within their queue's guarantee.
	Guaranteed map[string]bool
	// Owed are the queues below their guarantee with pending work it admits, and the GPUs
	// they are owed: they may reclaim borrowed GPUs from jobs younger than the planner's
	// minimum run time.
	Owed map[string]int
	// Relocated holds the job keys of waiting groups that were stopped this round to move
	// within their queue's guarantee (Preemption.Relocated): the queue stage places them first.
	Relocated map[string]bool
}

// QueueOf is the queue of a namespace.
func (t *Tenancy) QueueOf(ns string) string {
	if q, ok := t.Queue[ns]; ok {
		return q
	}
	return t.DefaultQueue
}

// GPUCap limits the GPUs that the jobs of some namespaces hold together, running plus newly
// placed: a queue's maximum (Namespaces are its own), or the reserve of a queue under its
// guarantee (Except: every namespace but the queue's may use only what the queue leaves).
type GPUCap struct {
	// Name says what the cap is, for wait reasons: "queue team-a".
	Name       string
	Namespaces []string
	Except     bool
	// GPUType, when set, counts only GPUs of that type (a guarantee by type).
	GPUType string
	GPUs    int
	// Reason is the wait reason of a job the cap holds back.
	Reason string
}

// Covers reports whether the cap counts jobs of namespace ns.
func (c *GPUCap) Covers(ns string) bool {
	in := false
	for _, n := range c.Namespaces {
		if n == ns {
			in = true
			break
		}
	}
	return in != c.Except
}

// Held counts the GPUs the cap counts among the snapshot's running allocations and the
// decisions ds.
func (c *GPUCap) Held(snap *Snapshot, ds []Decision) int {
	n := 0
	for _, a := range snap.Running {
		if c.Covers(a.Namespace) && (c.GPUType == "" || a.GPUType == c.GPUType) {
			n += len(a.DeviceIDs)
		}
	}
	for i := range ds {
		if c.Covers(ds[i].Namespace) && (c.GPUType == "" || ds[i].GPUType == c.GPUType) {
			n += ds[i].GPUs()
		}
	}
	return n
}

// CapWait is the wait reason of a pending job that some cap of the snapshot keeps out, with
// the decisions ds counted as placed: the first cap covering the job whose room is less than
// the job's GPUs; "" when none does. A cap of one GPU type keeps a job out only when no other
// type could take it, so it is not named.
func CapWait(snap *Snapshot, j *Job, ds []Decision) string {
	for i := range snap.Caps {
		c := &snap.Caps[i]
		if !c.Covers(j.Namespace) || c.GPUType != "" {
			continue
		}
		if used := c.Held(snap, ds); used+j.GPUs > c.GPUs {
			if c.Reason != "" {
				return c.Reason
			}
			return fmt.Sprintf("%s allows %d GPUs and holds %d", c.Name, c.GPUs, used)
		}
	}
	return ""
}

// Node is one client node and its devices.
type Node struct {
	ID         string
	Name       string
	Datacenter string
	Pool       string
	Class      string
	// Status is Nomad's node status: "ready", "down", "disconnected", "initializing".
	Status     string
	Eligible   bool
	Draining   bool
	Attributes map[string]string
	Meta       map[string]string
	Devices    []DeviceGroup
	// Interconnect describes how GPUs inside the node talk ("nvlink", "pcie"); the simulator
	// sets it from the cluster spec, Nomad from device topology.
	Interconnect string
}

// Ready reports whether new work may be placed on the node.
func (n *Node) Ready() bool { return n.Status == "ready" && n.Eligible && !n.Draining }

// DeviceGroup mirrors a Nomad device group: instances sharing vendor, type and name.
type DeviceGroup struct {
	Vendor     string
	Type       string
	Name       string
	Attributes map[string]Attribute
	Instances  []Instance
	// GPUType is the canonical GPU type key (see model/gpuspec), derived from Name.
	GPUType string
}

// ID is Nomad's "vendor/type/name" tuple string.
func (g *DeviceGroup) ID() string { return g.Vendor + "/" + g.Type + "/" + g.Name }

// Healthy counts the group's healthy instances.
func (g *DeviceGroup) Healthy() int {
	n := 0
	for _, in := range g.Instances {
		if in.Healthy {
			n++
		}
	}
	return n
}

// Instance is one GPU (or MIG slice).
type Instance struct {
	ID                string
	Healthy           bool
	HealthDescription string
	PCIBusID          string
	// Topology, published by the hetgpu device plugin in instance stats.
	NVLinkPeers []string
	NUMANode    int
	PCIeSwitch  string
}

// Attribute is a typed device attribute with an optional unit, as Nomad's structs.Attribute.
// Exactly one of the value pointers is set.
type Attribute struct {
	Float  *float64
	Int    *int64
	String *string
	Bool   *bool
	Unit   string
}

func (a Attribute) GoString() string {
	switch {
	case a.Float != nil:
		return fmt.Sprintf("%v%s", *a.Float, a.Unit)
	case a.Int != nil:
		return fmt.Sprintf("%d%s", *a.Int, a.Unit)
	case a.String != nil:
		return *a.String
	case a.Bool != nil:
		return fmt.Sprintf("%t", *a.Bool)
	}
	return ""
}

// Alloc is a running (or starting) placement of a job on one node.
type Alloc struct {
	ID        string
	Namespace string
	JobID     string
	Group     string
	NodeID    string
	// DeviceIDs are the GPU instance IDs the allocation holds.
	DeviceIDs []string
	GPUType   string
	StartTime time.Time
	// Shared is true when the job agreed to share its GPUs with another job.
	Shared bool
	// Hetgpu holds the job's annotations where the backend knows them (the workload a
	// co-location prediction needs for a running co-runner).
	Hetgpu Annotations

	// key is Key remembered (RememberKey); used only while it still matches the fields.
	key string
}

// Job is one pending task group waiting for a placement decision.
type Job struct {
	Namespace string
	ID        string
	// ParentID is the parameterized or periodic job a dispatched or periodic child was
	// launched from ("" for other jobs): children share their parent's runtime history.
	ParentID string
	Group    string
	// Priority is Nomad's job priority (1..100, default 50).
	Priority   int
	SubmitTime time.Time
	// GPUs is the total number of GPUs the group needs.
	GPUs int
	// GPUsPerNode, when > 0, forces every node of the placement to hold exactly this many GPUs
	// (a Nomad task group with count > 1, one allocation per node). 0 allows any split.
	GPUsPerNode int
	// DeviceName is the requested device ID ("nvidia/gpu", "gpu", "nvidia/gpu/Tesla T4").
	DeviceName        string
	DeviceConstraints []Constraint
	DeviceAffinities  []Affinity
	// Constraints are job- and group-level constraints on node targets.
	Constraints []Constraint
	Affinities  []Affinity
	Hetgpu      Annotations
	// JobModifyIndex is Nomad's index for EnforceRegister; zero in the simulator.
	JobModifyIndex uint64
	// AttainedGPUSeconds is the GPU time the job already received before a preemption or
	// requeue (used by least-attained-service policies); zero for jobs never run.
	AttainedGPUSeconds float64

	// key is Key remembered (RememberKey); used only while it still matches the fields.
	key string
}

// Key identifies a job across rounds: "namespace/id/group".
func (j *Job) Key() string {
	if keyOf(j.key, j.Namespace, j.ID, j.Group) {
		return j.key
	}
	return GroupKey(j.Namespace, j.ID, j.Group)
}

// MaxNodes is the distribution degree D_j: how many nodes the job may span (>= 1).
func (j *Job) MaxNodes() int {
	if j.Hetgpu.MaxNodes > 0 {
		return j.Hetgpu.MaxNodes
	}
	return 1
}

// Constraint is a Nomad constraint (LTarget Operand RTarget).
type Constraint struct {
	LTarget string
	RTarget string
	Operand string
}

func (c Constraint) String() string { return fmt.Sprintf("%s %s %s", c.LTarget, c.Operand, c.RTarget) }

// Affinity is a Nomad affinity: a constraint with a weight in [-100, 100].
type Affinity struct {
	LTarget string
	RTarget string
	Operand string
	Weight  int8
}

// Annotations are the job's hetgpu.* meta keys, parsed. Zero values mean "not given".
type Annotations struct {
	Enabled bool
	// Model is "family/name" or just a name, e.g. "resnet/ResNet-50" or "BERT".
	ModelFamily string
	ModelName   string
	BatchSize   int
	// ParamCount is the model's parameter count when known.
	ParamCount float64
	Framework  string
	// EstRuntime is the user's runtime estimate on the reference GPU type; in a live snapshot,
	// what the backend expects is left of it (EstimateModel).
	EstRuntime time.Duration
	// DeclaredRuntime is hetgpu.runtime as the user wrote it, where a backend replaced
	// EstRuntime by what is left of it (for explanations).
	DeclaredRuntime time.Duration
	// MinThroughput is T_min: the slowest acceptable throughput (samples or steps per second).
	MinThroughput float64
	// MaxNodes is D_j, the distribution degree.
	MaxNodes int
	// EnergyWeight overrides the placement's energy weight for this job when > 0.
	EnergyWeight  float64
	PriorityClass string
	AllowSharing  bool
	// Preemptible says the job checkpoints and may be stopped and restarted elsewhere
	// (hetgpu.preemptible).
	Preemptible bool
	// NoGang takes the group out of its job's gang (hetgpu.gang = "false"); by default the
	// waiting groups of one job are placed and preempted all or nothing.
	NoGang bool
	// Ran is how long the group ran in earlier allocations (hetgpu.ran, written by hetgpu when
	// it preempts a checkpointing group).
	Ran time.Duration
	// Steps is hetgpu.steps: the job's total work in steps (per-GPU batches, whole job); 0
	// when not declared.
	Steps float64
	// Est says how EstRuntime was read (the round's estimates step).
	Est EstimateInfo
}

// EstimateSource is where a job's runtime estimate comes from.
type EstimateSource uint8

// Sources of runtime estimates, in the order the estimates step prefers them.
const (
	// EstNone: no estimate (EstRuntime is 0).
	EstNone EstimateSource = iota
	// EstUser: the user's hetgpu.runtime.
	EstUser
	// EstSteps: hetgpu.steps over the predicted throughput on the reference GPU type.
	EstSteps
	// EstHistory: the finished runs of similar jobs (model/history).
	EstHistory
)

var estimateSources = [...]string{"none", "user", "steps", "history"}

func (s EstimateSource) String() string {
	if int(s) < len(estimateSources) {
		return estimateSources[s]
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// MarshalText writes the source's name (JSON of explanations).
func (s EstimateSource) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// EstimateInfo is how a job's runtime estimate was read.
type EstimateInfo struct {
	Source EstimateSource
	// Level, Runs and Confidence describe a history estimate: the most specific group of
	// similar jobs with finished runs ("job", "model", "gpus", "namespace", "cluster", or
	// "prior" before any run), how many runs it holds, and the share of the estimate resting
	// on them.
	Level      string
	Runs       int
	Confidence float64
	// Ran is the time the job has run so far (per GPU), which the estimate is conditioned on.
	Ran time.Duration
	// Left, for a history estimate, is the expected time left; EstRuntime is then what the
	// job ranks as (history.Estimate.Rank: a fresh job whose peers mostly finish soon ranks
	// as short even when its expected time left is long).
	Left time.Duration
}

// MinRemainingEstimate is the least an EstimateModel gives: a job that has outrun its estimate
// still needs some time, and a zero would read as "no estimate".
const MinRemainingEstimate = time.Minute

// EstimateModel reads a user's runtime estimate of a job that has already run for a while. It
// is how the live sidecar reads hetgpu.runtime, and what the simulator's live estimates
// (sim.Config.LiveEstimates) replay, so both backends rank by the same rule.
type EstimateModel struct {
	// Sigma is how far users' estimates are off: the standard deviation of log(true runtime /
	// estimate). 0 trusts the estimate: what is left is the estimate minus the time run.
	// Above 0 the true runtime T is taken as log-normal around the estimate (median est) and
	// what is left is its expectation given that the job still runs, E[T - ran | T > ran]: a
	// job that has outrun its estimate is expected to run on, one near its estimate is not
	// taken as nearly done, and a job that has not started gets the mean, est x exp(Sigma²/2).
	Sigma float64
	// Bias is the mean of log(true runtime / estimate): users who overestimate by half give
	// about -0.4. The true runtime's median is est x exp(Bias); 0 takes estimates as unbiased.
	Bias float64
}

// MaxEstimateSigma bounds EstimateModel.Sigma (a factor of e^3 = 20 either way at one sigma).
const MaxEstimateSigma = 3

// SigmaSetting is the log-normal spread of estimate errors that a setting set means: def when it
// is zero (unset), none (0: exact estimates) when it is negative, else set itself.
func SigmaSetting(set, def float64) float64 {
	switch {
	case set < 0:
		return 0
	case set == 0:
		return def
	}
	return set
}

// Unestimated is the expected time left of a running job without an estimate that has run
// for ran: as long again (the Lindy rule, apt for heavy-tailed training times), at least
// MinRemainingEstimate.
func Unestimated(ran time.Duration) time.Duration { return max(ran, MinRemainingEstimate) }

// Remaining is the expected time left of a job estimated at est (> 0) that has run for ran,
// at least MinRemainingEstimate.
func (m EstimateModel) Remaining(est, ran time.Duration) time.Duration {
	if m.Bias != 0 {
		est = time.Duration(float64(est) * math.Exp(m.Bias))
	}
	s := m.Sigma
	if !(s > 0) {
		return max(est-ran, MinRemainingEstimate)
	}
	e, r := est.Seconds(), max(ran, 0).Seconds()
	mean := e * math.Exp(s*s/2)
	left := mean
	if r > 0 {
		// T = est x LN(0, s²): E[T 1{T>r}] = mean x Phi(s - a), P(T > r) = 1 - Phi(a),
		// a = ln(r/est)/s.
		a := math.Log(r/e) / s
		tail := 0.5 * math.Erfc(a/math.Sqrt2)
		if tail > 1e-300 {
			left = mean*0.5*math.Erfc((a-s)/math.Sqrt2)/tail - r
		} else {
			// Far in the tail the mean residual life of a log-normal is about r s² / ln(r/est).
			left = r * s * s / (a * s)
		}
	}
	if math.IsNaN(left) || left > float64(math.MaxInt64/2)/1e9 {
		left = float64(math.MaxInt64/2) / 1e9
	}
	return max(time.Duration(left*float64(time.Second)), MinRemainingEstimate)
}

// Assignment is the part of a decision on one node.
type Assignment struct {
	NodeID string
	// DeviceGroup is the group's "vendor/type/name".
	DeviceGroup string
	InstanceIDs []string
}

// Decision is the scheduler's choice for one job.
type Decision struct {
	Namespace string
	JobID     string
	Group     string
	Assign    []Assignment
	GPUType   string
	// Predicted throughput (job units per second, whole job) and power (W, all GPUs).
	PredThroughput float64
	PredPowerW     float64
	Score          float64
	Rank           int
	// Shared marks a placement on GPUs shared with another job.
	Shared bool
	// Explanation is a human-readable why, shown in the explain API and the job's UI block.
	Explanation string
}

// JobKey returns the Key of the decided job.
func (d *Decision) JobKey() string { return GroupKey(d.Namespace, d.JobID, d.Group) }

// GPUs is the number of instances the decision uses.
func (d *Decision) GPUs() int {
	n := 0
	for _, a := range d.Assign {
		n += len(a.InstanceIDs)
	}
	return n
}

// PinResult reports what a backend did with one decision.
type PinResult struct {
	JobKey string
	// Applied is true when the backend accepted the decision.
	Applied bool
	// Conflict is true when the job changed underneath us; decide again next round.
	Conflict bool
	Err      error
}

// Observation is one measured run, as the task driver reports it and the catalog stores it.
type Observation struct {
	Namespace string `json:"namespace"`
	JobID     string `json:"job_id"`
	Group     string `json:"group"`
	Task      string `json:"task,omitempty"`
	// AllocID is the Nomad allocation that ran it; with Task it keys the record, so a
	// retried or re-sent report is stored once.
	AllocID     string  `json:"alloc_id,omitempty"`
	ModelFamily string  `json:"model_family,omitempty"`
	ModelName   string  `json:"model_name,omitempty"`
	BatchSize   int     `json:"batch_size,omitempty"`
	ParamCount  float64 `json:"param_count,omitempty"`
	Framework   string  `json:"framework,omitempty"`
	// GPUType is the canonical type key; GPUName the device group name as fingerprinted.
	GPUType string `json:"gpu_type"`
	GPUName string `json:"gpu_name,omitempty"`
	GPUs    int    `json:"gpus"`
	Nodes   int    `json:"nodes,omitempty"`
	// Throughput is in steps per second for the whole job: one step is one per-GPU batch, summed
	// over the job's GPUs (Gavel's unit, the predictor's and the simulator's). A reporter that
	// counts samples sets SamplesPerSec and, when it knows the per-GPU batch size, Throughput =
	// SamplesPerSec / BatchSize; the sidecar derives it the same way when only samples came.
	Throughput    float64 `json:"throughput"`
	SamplesPerSec float64 `json:"samples_per_sec,omitempty"`
	EnergyJ       float64 `json:"energy_j"`
	AvgPowerW     float64 `json:"avg_power_w,omitempty"`
	PeakPowerW    float64 `json:"peak_power_w,omitempty"`
	RuntimeS      float64 `json:"runtime_s"`
	ExitCode      int     `json:"exit_code"`
	// CoRunner is the model name of a job that shared the GPU, if any; CoRunnerBatchSize
	// its batch size and CoRunnerJob its "namespace/job/group" (GPU slots under MPS).
	CoRunner          string    `json:"co_runner,omitempty"`
	CoRunnerBatchSize int       `json:"co_runner_batch_size,omitempty"`
	CoRunnerJob       string    `json:"co_runner_job,omitempty"`
	Time              time.Time `json:"time"`
	// Partial marks a run stopped, killed, preempted or failed before it finished: it is
	// stored and never counted as a finished run; a learner that takes partial runs (the
	// predictor) learns its throughput at a lower weight.
	Partial bool `json:"partial,omitempty"`
	// Steps is how many steps (per-GPU batches, whole job) the run completed, where the
	// reporter counted them; with Partial it says how far a stopped run got.
	Steps float64 `json:"steps,omitempty"`
}

// Learnable reports whether the run finished normally, so its measurements describe the
// workload: not partial and exit code 0.
func (o *Observation) Learnable() bool { return !o.Partial && o.ExitCode == 0 }

// StepsPerSec returns the run's throughput in steps per second, deriving it from samples per
// second and the per-GPU batch size when the reporter only counted samples; 0 when unknown.
// A given Throughput, valid or not, is returned as is for validators to judge.
func (o *Observation) StepsPerSec() float64 {
	if o.Throughput != 0 {
		return o.Throughput
	}
	if o.SamplesPerSec > 0 && o.BatchSize > 0 {
		return o.SamplesPerSec / float64(o.BatchSize)
	}
	return 0
}
