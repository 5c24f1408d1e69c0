package policies

import (
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/policies/baselines"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// newGavel is Gavel's heterogeneity-aware max-min fairness with its 6-minute rounds (Narayanan
// et al., OSDI 2020; baselines.Gavel documents the LP and the mechanism). One baselines.Gavel is
// the ranker, the preemption stage, the placer (each job on the GPU type its grant names, by
// first-fit) and the round clock (sched.Waker). Throughputs come from the predictor: the
// simulator's measured table, as Gavel profiles every job type on every GPU type, or the live
// sidecar's predictor.
func newGavel(o Options) (Policy, error) {
	g := baselines.NewGavel()
	return Policy{Stages: sched.Stages{Ranker: g, Preemptor: g, Placer: g, Predictor: typesPredictor(o)},
		Estimates: sim.Estimates{Off: true}}, nil
}
