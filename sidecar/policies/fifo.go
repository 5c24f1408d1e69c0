package policies

import (
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/policies/baselines"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
)

// The queue-order baselines: a ranker and Nomad's bin-packing (place.FirstFit), the predictor
// only telling the GPU types a job can run on. None preempts but tiresias.

// typesPredictor is the predictor of the first-fit baselines: the live sidecar's, else the
// simulator's oracle table.
func typesPredictor(o Options) sched.Predictor {
	if o.Predictor != nil {
		return o.Predictor
	}
	p := sim.TablePredictor{Table: o.Throughput, Specs: gpuspec.Default()}
	if o.Spec != nil {
		p.CrossNodeEfficiency = o.Spec.Network.CrossNodeEfficiency
	}
	return p.Memoized()
}

// newFIFO is first-in first-out with head-of-line blocking and first-fit bin-packing: the
// oldest waiting job starts as soon as some node (any GPU type) fits it, on the fullest node
// that does, as Nomad's default bin-packing scheduler would place it; nothing overtakes a
// blocked job. It is the FIFO baseline of Gavel (OSDI 2020) and Tiresias (NSDI 2019):
// heterogeneity-unaware and non-preemptive.
func newFIFO(o Options) (Policy, error) {
	return Policy{Stages: sched.Stages{Ranker: place.FIFO{}, Predictor: typesPredictor(o), Placer: place.FirstFit{}},
		Estimates: sim.Estimates{Off: true}}, nil
}

// newSJF is shortest-job-first with oracle runtimes (the remaining runtime on the reference GPU,
// known exactly), non-preemptive, with backfilling: jobs are tried shortest first and every one
// that fits starts. It is the classic SJF baseline (e.g. Tiresias, NSDI 2019; Gavel's "min total
// duration" family), given information no real scheduler has; on the live sidecar it ranks by
// the jobs' hetgpu.est_runtime annotations.
func newSJF(o Options) (Policy, error) {
	return Policy{Stages: sched.Stages{Ranker: baselines.SJF{}, Predictor: typesPredictor(o), Placer: place.FirstFit{Backfill: true}},
		Estimates: sim.Estimates{Sigma: -1}}, nil
}

// newTiresias is Tiresias' discretised two-dimensional least-attained-service scheduler (Gu et
// al., NSDI 2019; baselines.LAS): jobs in priority queues by attained GPU service (thresholds 1 and
// 10 GPU-hours), FIFO within a queue, a job that waited 8x its run time promoted; every round
// the highest-priority jobs that fit in the cluster's GPUs run and the preemptible rest are
// preempted (progress kept). Placement is first-fit with backfilling (consolidated, bin-packed),
// heterogeneity-unaware as Tiresias is.
func newTiresias(o Options) (Policy, error) {
	las := baselines.NewLAS()
	return Policy{Stages: sched.Stages{Ranker: las, Preemptor: las, Predictor: typesPredictor(o), Placer: place.FirstFit{Backfill: true}},
		Estimates: sim.Estimates{Off: true}}, nil
}
