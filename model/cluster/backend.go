package cluster

import (
	"context"
	"errors"
	"time"
)

// Backend is a cluster the service (sidecar/runtime/service) drives: Nomad (sidecar/backends/nomad) or the
// embedded simulated cluster. Beyond Cluster it watches for changes and does the
// housekeeping between decision rounds.
type Backend interface {
	Cluster
	// Watch keeps the backend's view of the cluster current until ctx ends. It calls changed
	// (which never blocks) whenever a decision round may be due. It returns nil when ctx ends
	// and an error only when watching cannot continue at all.
	Watch(ctx context.Context, changed func()) error
	// Maintain runs before every round: it re-holds pinned jobs whose node or GPUs failed,
	// reports runs that finished, where Nomad placed un-held annotated jobs (for shadow
	// comparison), jobs whose annotations are malformed, and jobs that are gone.
	Maintain(ctx context.Context) (*Maintenance, error)
}

// Maintenance is what Backend.Maintain found.
type Maintenance struct {
	Reheld   []Rehold
	Finished []FinishedRun
	Placed   []Placement
	Invalid  []InvalidJob
	// Gone are job keys ("ns/id/group") deregistered or purged since the last call.
	Gone []string
}

// Rehold is a pinned job put back on hold.
type Rehold struct {
	JobKey string
	Reason string
	// Applied is false when re-registering failed (retried next round); Err says why.
	Applied bool
	Err     error
}

// FinishedRun is one finished run of a task group: all its allocations of one job version are
// terminal.
type FinishedRun struct {
	// Key identifies the run across restarts for a reporter without allocation IDs (the
	// simulated backend): its record claims "run/<Key>".
	Key string
	// AllocIDs are the run's Nomad allocations: its record claims "alloc/<id>" for each, so
	// it is stored and learned once whoever (task driver or sidecar) reports it first.
	AllocIDs []string
	Obs      Observation
	// Start is when the first task started.
	Start time.Time
	// Samples is how many device power samples the energy figure integrates (0: no energy).
	Samples int
	// EstRuntime is the group's hetgpu.runtime (0: none) and Ran its hetgpu.ran, the time it
	// ran before this run: with the run's own runtime they tell how far the estimate was off.
	EstRuntime, Ran time.Duration
	// EnergySource says where Obs.EnergyJ came from: "counter" (the GPUs' energy counters in
	// the device stats, read during the run), "power" (their sampled power, integrated) or
	// "" (not measured). Progress is set when Obs.Steps (and the throughput) came from the
	// task's progress file.
	EnergySource string
	Progress     bool
	// ParentID is the job's parent (a dispatched or periodic child's; "" for other jobs): the
	// run teaches the runtime history of the parent's family (model/history).
	ParentID string
}

// Placement is where Nomad itself placed an annotated job that was not held.
type Placement struct {
	JobKey    string
	NodeIDs   []string
	DeviceIDs []string
	GPUType   string
	Time      time.Time
}

// InvalidJob is a held job the sidecar cannot decide for: its annotations are malformed (the
// error names key, value and what is expected) or its request cannot be read. It stays held.
type InvalidJob struct {
	JobKey string
	Err    string
}

// AllocLifetimes is a backend that knows its allocations' lifetimes (Nomad): a run record
// naming an allocation is then checked against it (runtime_s at most the allocation's
// lifetime). End is zero while the allocation runs.
type AllocLifetimes interface {
	AllocLifetime(allocID string) (start, end time.Time, ok bool)
}

// ErrJobGone marks a PinResult (or a preemption) for a job deregistered before the backend
// acted on it; the service drops the job.
var ErrJobGone = errors.New("job is gone (deregistered or purged)")
