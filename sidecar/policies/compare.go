package policies

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/stages/queue"
)

// CompareOptions describe one `hetgpu sim` comparison.
type CompareOptions struct {
	// Cluster is a bundled name or HCL file (sim.LoadSpec); Trace a trace reference
	// (trace.Load).
	Cluster, Trace string
	// Policies are registered names (see ParseList).
	Policies []string
	Seed     uint64
	// Parallel bounds concurrent simulations (GOMAXPROCS when <= 0).
	Parallel int
	Logger   hclog.Logger
	// Progress, when set, gets (policy index, finished jobs) and is called once with the total
	// job count as (-1, total) before the runs start.
	Progress func(i, done int)
	// Throughput defaults to throughput.Bundled().
	Throughput *throughput.Table
	// RestartPenaltyS is the work a preempted job loses per restart (sim.Config).
	RestartPenaltyS float64
	// EstimateReplay: how runtime estimates are replayed (sim.Config).
	sim.EstimateReplay
	// Queues is a queue configuration for the hetgpu pipelines: "" none, "auto" or "auto:F"
	// (one queue per namespace, guarantees splitting F of the cluster by demand), or an HCL
	// file of queue blocks (queue.Load).
	Queues string
	// Starvation is the hetgpu rankers' starvation guard (Options.Starvation; 0 off).
	Starvation float64
}

// DefaultRestartPenaltyS is what `hetgpu sim` and `hetgpu train eval` charge every preemptive
// policy (tiresias, gavel, hetgpu) per restart: 30 s of lost work for checkpoint restore and
// warm-up (Gavel and Tiresias report restarts of seconds to tens of seconds).
const DefaultRestartPenaltyS = 30

// Comparison is the outcome of Compare.
type Comparison struct {
	Spec    *sim.Spec
	Trace   *trace.Trace
	Results []*sim.Result
}

// Compare loads the cluster and trace and simulates every policy on them.
func Compare(ctx context.Context, o CompareOptions) (*Comparison, error) {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	tab := o.Throughput
	if tab == nil {
		var err error
		if tab, err = throughput.Bundled(); err != nil {
			return nil, fmt.Errorf("throughput table: %w", err)
		}
	}
	spec, err := sim.LoadSpec(o.Cluster)
	if err != nil {
		return nil, err
	}
	tr, err := trace.Load(o.Trace, sim.TraceOptions(tab, o.Seed))
	if err != nil {
		return nil, err
	}
	qc, err := queue.Load(o.Queues, spec.TotalGPUs(), demand(tr, tab))
	if err != nil {
		return nil, err
	}
	if warns, _ := qc.Validate(spec.TotalGPUs()); len(warns) > 0 {
		for _, w := range warns {
			o.Logger.Warn(w)
		}
	}
	ps := make([]*sim.PipelinePolicy, 0, len(o.Policies))
	for _, name := range o.Policies {
		p, err := New(name, Options{Spec: spec, Throughput: tab, Seed: o.Seed, Logger: o.Logger.Named(name), Queues: qc, Starvation: o.Starvation})
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if o.Progress != nil {
		o.Progress(-1, len(tr.Jobs))
	}
	res, err := sim.SimulateAll(ctx, sim.Setup{Spec: spec, Throughput: tab, Trace: tr, Logger: o.Logger, RestartPenaltyS: o.RestartPenaltyS,
		EstimateReplay: o.EstimateReplay}, ps, o.Parallel, o.Progress)
	if err != nil {
		return nil, err
	}
	return &Comparison{Spec: spec, Trace: tr, Results: res}, nil
}

// demand is the GPU-seconds each namespace's jobs ask for: GPUs x the recorded duration, or
// the work over the throughput on the reference GPU type (1 s when neither is known).
func demand(tr *trace.Trace, tab *throughput.Table) map[string]float64 {
	out := map[string]float64{}
	for _, j := range tr.Jobs {
		d := j.DurationS
		if d <= 0 && j.TotalSteps > 0 {
			ref := j.RefGPUType
			if ref == "" {
				ref = "v100"
			}
			if v, _, ok := tab.Throughput(j.JobType, ref, j.GPUs); ok && v > 0 {
				d = j.TotalSteps / v
			}
		}
		out[j.Namespace] += float64(j.GPUs) * max(d, 1)
	}
	return out
}
