package policies

import (
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/policies/baselines"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/estimate"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
	"github.com/hetgpu/hetgpu/sidecar/stages/preempt"
	"github.com/hetgpu/hetgpu/sidecar/stages/queue"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// Queue-priority baselines of the prioritiser issue (sidecar/stages/rank documents each formula and
// its source). Both start jobs in priority order wherever Nomad's bin-packing would put them,
// every job that fits (place.FirstFit with backfilling), like sjf.

// newSlurm is Slurm's multifactor priority (age, job size, fair-share; baselines.Slurm). It needs
// no runtime estimates.
func newSlurm(o Options) (Policy, error) {
	return Policy{Stages: sched.Stages{Ranker: &baselines.Slurm{}, Predictor: typesPredictor(o), Placer: place.FirstFit{Backfill: true}},
		Estimates: sim.Estimates{Off: true}}, nil
}

// newF1 is Carastan-Santos & de Camargo's learned priority function F1 (baselines.F1). It ranks by
// requested runtime, so it sees the simulated user estimates hetgpu also sees (true runtime x
// log-normal error, sim.DefaultEstimateSigma), not sjf's exact ones.
func newF1(o Options) (Policy, error) {
	return Policy{Stages: sched.Stages{Ranker: &baselines.F1{}, Predictor: typesPredictor(o), Placer: place.FirstFit{Backfill: true}},
		Estimates: sim.Estimates{Seed: o.Seed}}, nil
}

// HetgpuPipeline is the full hetgpu policy around a ranker: the ranker, the predictor (GOGH's
// P1/P2, refined online from the runs the simulation measures) and the placement MILP with the
// hetgpu preset, run as the production pipeline. Like F1 it sees the simulated user runtime
// estimates (sim.Estimates), never exact runtimes. Training builds it around the policy
// being trained; the registered "hetgpu" policy around the bundled one.
func HetgpuPipeline(o Options, r sched.Ranker) (*sim.PipelinePolicy, error) {
	p, err := hetgpuStages(o, r)
	if err != nil {
		return nil, err
	}
	p.Name = "hetgpu"
	return p.Sim(), nil
}

// hetgpuStages builds the hetgpu policy around a ranker, for both backends: the predictor
// (Options.Predictor, else a fresh one), the placement MILP (Options.Placement's preset, hetgpu
// by default), the preemption planner (Options.Preempt, unless NoPreempt) and the queue stage
// when Options.Queues enables it. The simulator, training (HetgpuPipeline) and the live sidecar
// (Live("hetgpu") with its own predictor and Options.Ranker) all build hetgpu here.
func hetgpuStages(o Options, r sched.Ranker) (Policy, error) {
	st, err := hetgpuPipelineStages(o, r)
	if err != nil {
		return Policy{}, err
	}
	return Policy{Stages: st, Estimates: sim.Estimates{Seed: o.Seed}}, nil
}

func hetgpuPipelineStages(o Options, r sched.Ranker) (sched.Stages, error) {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	pred, err := productionPredictor(o)
	if err != nil {
		return sched.Stages{}, fmt.Errorf("predictor: %w", err)
	}
	preset, err := place.Preset(o.Placement)
	if err != nil {
		return sched.Stages{}, err
	}
	pcfg := o.placement(preset)
	// The simulator co-locates on whole GPUs (its slots); Nomad gives a whole GPU to one
	// allocation, so the live sidecar shares only through the device plugin's slot groups.
	pcfg.PairIdleGPUs = !o.Live
	pl, err := place.New(pcfg, o.Logger)
	if err != nil {
		return sched.Stages{}, fmt.Errorf("placer: %w", err)
	}
	hist := o.History
	if hist == nil {
		if hist, err = history.New(history.Config{}); err != nil {
			return sched.Stages{}, fmt.Errorf("runtime history: %w", err)
		}
	}
	st := sched.Stages{Ranker: r, Predictor: pred, Placer: pl, Learner: learnerOf(pred), Estimator: estimate.New(hist)}
	if !o.NoPreempt {
		pc := preempt.Default()
		if o.Preempt != nil {
			pc = *o.Preempt
		}
		if st.Preemptor, err = preempt.New(pc); err != nil {
			return sched.Stages{}, fmt.Errorf("preemption planner: %w", err)
		}
	}
	if o.Queues.Enabled() {
		set, err := queue.New(o.Queues)
		if err != nil {
			return sched.Stages{}, fmt.Errorf("queues: %w", err)
		}
		st.Queues = set
	}
	return st, nil
}

// HetgpuHeuristic is the hetgpu pipeline with the ranker's fallback heuristic order
// (rank.New(nil)) instead of the learned policy: what the learned order adds is the difference
// between the two on the same trace and cluster.
const HetgpuHeuristic = "hetgpu-heuristic"

func newHetgpuHeuristic(o Options) (Policy, error) {
	r, err := rank.New(nil, rank.WithExplain(false), rank.WithHeuristic(rank.Heuristic{Starvation: o.Starvation}))
	if err != nil {
		return Policy{}, err
	}
	return hetgpuStages(o, r)
}

// HetgpuOracle is hetgpu-heuristic shown each job's exact remaining runtime in simulation
// instead of the user's estimate (as sjf is): the most any ranker could gain from knowing runtimes
// better, the ceiling against which a learned order's gain over the heuristic is judged. Live it
// is hetgpu-heuristic (a live sidecar has only the user's estimate).
const HetgpuOracle = "hetgpu-oracle"

func newHetgpuOracle(o Options) (Policy, error) {
	p, err := newHetgpuHeuristic(o)
	p.Estimates = sim.Estimates{Sigma: -1}
	return p, err
}

// HetgpuHindsight is hetgpu-heuristic whose runtime history knows, from the start of a
// simulated run, every job's runtime except at its own job level (sim.Estimates.Hindsight):
// each group of similar jobs' distribution exactly, no job's own runtime. Jobs without an
// estimate rank by that; what any order reading runtimes from similar jobs' runs can know at
// best, the ceiling of estimate-free ranking beside hetgpu-oracle's of exact runtimes. Live it
// is hetgpu-heuristic.
const HetgpuHindsight = "hetgpu-hindsight"

func newHetgpuHindsight(o Options) (Policy, error) {
	p, err := newHetgpuHeuristic(o)
	p.Estimates.Hindsight = true
	return p, err
}

// newHetgpu is the policy the sidecar runs by default: the bundled pretrained prioritiser
// (or its fallback heuristic when a build has none) in HetgpuPipeline, or Options.Ranker (the
// live sidecar chooses its ranker from its configuration and evidence, app.StagesWithRanker).
func newHetgpu(o Options) (Policy, error) {
	if o.Ranker != nil {
		return hetgpuStages(o, o.Ranker)
	}
	r, err := rank.NewDefault(rank.WithExplain(false), rank.WithHeuristic(rank.Heuristic{Starvation: o.Starvation}))
	if err != nil {
		return Policy{}, err
	}
	return hetgpuStages(o, r)
}
