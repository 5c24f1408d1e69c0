package predict

import (
	"math"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// Observed co-location: a run record naming its co-runner (a task on a GPU slot that shared
// the GPU under MPS) measures one side of a pair: the run's throughput over what the
// predictor expects of the workload alone on that GPU type. The geometric mean of such
// ratios, per GPU type and ordered pair of workloads, replaces that side of the table or
// neighbour prediction once the pair was seen.

type pairKey struct{ gpu, a, b string }

// observedPairs collects the ratios of the single-GPU shared runs in recs, against st's
// isolated predictions.
func (p *Predictor) observedPairs(st *state, recs []Record) map[pairKey]float64 {
	means := ratioMeans{}
	for i := range recs {
		r := &recs[i]
		if _, mig := gpuspec.MIGType(r.GPUType); r.CoRunner == "" || mig || r.GPUs != 1 || r.Throughput <= 0 || r.Source != SourceObserved || r.Partial {
			continue
		}
		g := gpuspec.Canonical(r.GPUType)
		iso := p.estimateOn(st, cacheKey{f: Features{Family: r.ModelFamily, Name: r.ModelName, BatchSize: r.BatchSize}}, g, 1).Throughput
		if iso <= 0 {
			continue
		}
		means.add(pairKey{g, workloadKey(r.ModelName, r.BatchSize), workloadKey(r.CoRunner, r.CoRunnerBatchSize)}, r.Throughput/iso)
	}
	return means.result()
}

// ratioMeans collects ratios per key for their geometric means, each bounded to [0.02, 1]: a
// ratio above 1 is noise or a bad baseline estimate, and the floor keeps one stalled run from
// dominating the mean.
type ratioMeans map[pairKey]*[2]float64

func (r ratioMeans) add(k pairKey, ratio float64) {
	a := r[k]
	if a == nil {
		a = &[2]float64{}
		r[k] = a
	}
	a[0] += math.Log(min(1, max(0.02, ratio)))
	a[1]++
}

func (r ratioMeans) result() map[pairKey]float64 {
	if len(r) == 0 {
		return nil
	}
	out := make(map[pairKey]float64, len(r))
	for k, a := range r {
		out[k] = math.Exp(a[0] / a[1])
	}
	return out
}

// refinePair replaces the sides of a predicted pair that were observed.
func (p *Predictor) refinePair(a, b *workload, gpu string, ra, rb float64, src string) (float64, float64, string) {
	st := p.current()
	if st == nil || len(st.pairs) == 0 {
		return ra, rb, src
	}
	ka, kb := a.key, b.key
	if v, ok := st.pairs[pairKey{gpu, ka, kb}]; ok {
		ra, src = v, SrcColocObserved
	}
	if v, ok := st.pairs[pairKey{gpu, kb, ka}]; ok {
		rb, src = v, SrcColocObserved
	}
	return ra, rb, src
}

// PredictPair predicts two single-GPU jobs sharing one GPU of a type (sched.PairPredictor):
// each job's throughput as a fraction of its throughput alone. ok is false when only the
// prior stands behind the answer, so callers keep their own default.
func (p *Predictor) PredictPair(a, b *cluster.Job, gpuType string) (ra, rb float64, ok bool) {
	ra, rb, src := p.Colocated(JobFeatures(a), JobFeatures(b), gpuType)
	if src == SrcColocPrior {
		return ra, rb, false
	}
	return ra, rb, true
}
