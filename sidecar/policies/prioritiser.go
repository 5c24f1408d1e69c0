package policies

import (
	"fmt"

	"github.com/hetgpu/hetgpu/sidecar/place"
	"github.com/hetgpu/hetgpu/sidecar/predict"
	"github.com/hetgpu/hetgpu/sidecar/preempt"
	"github.com/hetgpu/hetgpu/sidecar/queue"
	"github.com/hetgpu/hetgpu/sidecar/rank"
	"github.com/hetgpu/hetgpu/sidecar/rank/rlsim"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/sim"
)

// Queue-priority baselines of the prioritiser issue (sidecar/rank documents each formula and
// its source). Both start jobs in priority order wherever Nomad's bin-packing would put them,
// every job that fits (rlsim.RankedFirstFit), like sjf.

// newSlurm is Slurm's multifactor priority (age, job size, fair-share; rank.Slurm). It needs
// no runtime estimates.
func newSlurm(Options) (sim.Policy, error) {
	return &rlsim.RankedFirstFit{PolicyName: "slurm", Ranker: &rank.Slurm{}, Estimates: rlsim.Estimates{Off: true}}, nil
}

// newF1 is Carastan-Santos & de Camargo's learned priority function F1 (rank.F1). It ranks by
// requested runtime, so it sees the simulated user estimates hetgpu also sees (true runtime x
// log-normal error, rlsim.DefaultEstimateSigma), not sjf's exact ones.
func newF1(o Options) (sim.Policy, error) {
	return &rlsim.RankedFirstFit{PolicyName: "f1", Ranker: &rank.F1{}, Estimates: rlsim.Estimates{Seed: o.Seed}}, nil
}

// HetgpuPipeline is the full hetgpu policy around a ranker: the ranker, the predictor (GOGH's
// P1/P2, refined online from the runs the simulation measures) and the placement MILP with the
// hetgpu preset, run as the production pipeline. Like F1 it sees the simulated user runtime
// estimates (rlsim.Estimates), never exact runtimes. Training builds it around the policy
// being trained; the registered "hetgpu" policy around the bundled one.
func HetgpuPipeline(o Options, r sched.Ranker) (sim.Policy, error) {
	pred, err := predict.New(predict.Options{Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("predictor: %w", err)
	}
	pcfg := deterministic(place.PresetHetgpu())
	pcfg.PairIdleGPUs = true // the simulator applies co-location on whole GPUs (its slots)
	pl, err := place.New(pcfg, o.Logger)
	if err != nil {
		return nil, fmt.Errorf("placer: %w", err)
	}
	pre, err := preempt.New(preempt.Default())
	if err != nil {
		return nil, fmt.Errorf("preemption planner: %w", err)
	}
	p := &rlsim.Pipeline{PolicyName: "hetgpu", Ranker: r, Predictor: pred, Placer: pl, Learner: pred,
		Estimates: rlsim.Estimates{Seed: o.Seed}, Preemptor: pre}
	if !o.Queues.Enabled() {
		return p, nil
	}
	set, err := queue.New(o.Queues)
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	p.Queues = set
	return sim.MeterQueues(p, set), nil
}

// pipelineOf is the hetgpu pipeline inside a policy HetgpuPipeline built.
func pipelineOf(p sim.Policy) *rlsim.Pipeline {
	if m, ok := p.(*sim.QueueMeter); ok {
		p = m.Policy
	}
	return p.(*rlsim.Pipeline)
}

// HetgpuHeuristic is the hetgpu pipeline with the ranker's fallback heuristic order
// (rank.New(nil)) instead of the learned policy: what the learned order adds is the difference
// between the two on the same trace and cluster.
const HetgpuHeuristic = "hetgpu-heuristic"

func newHetgpuHeuristic(o Options) (sim.Policy, error) {
	r, err := rank.New(nil, rank.WithExplain(false))
	if err != nil {
		return nil, err
	}
	p, err := HetgpuPipeline(o, r)
	if err != nil {
		return nil, err
	}
	pipelineOf(p).PolicyName = HetgpuHeuristic
	return p, nil
}

// newHetgpu is the policy the sidecar runs by default: the bundled pretrained prioritiser
// (or its fallback heuristic when a build has none) in HetgpuPipeline.
func newHetgpu(o Options) (sim.Policy, error) {
	r, err := rank.NewDefault(rank.WithExplain(false))
	if err != nil {
		return nil, err
	}
	return HetgpuPipeline(o, r)
}
