package sched

import "github.com/hetgpu/hetgpu/model/cluster"

// PairPredictor is a Predictor that also predicts two jobs sharing one GPU of a type: each
// job's throughput as a fraction of its throughput alone (1 = no slowdown). ok is false when
// it has no basis for the pair; the placement then keeps its configured constant.
type PairPredictor interface {
	PredictPair(a, b *cluster.Job, gpuType string) (ratioA, ratioB float64, ok bool)
}
