package predict

import (
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// MIG slices: a slice type ("a100-mig-3g.20gb") is predicted from the parent type: the
// workload's throughput there times the slice's speed share (gpuspec.MIGSpeedShare: half its
// SM share, half its memory share), power times the slice's SM share. Runs on a slice refine
// it: the geometric mean of run throughput / the parent prediction replaces the speed share
// for that workload and slice type.

// SrcMIG prefixes the source of a slice prediction.
const SrcMIG = "mig"

// migKeyOf is the key of the workload a cache key stands for.
func migKeyOf(st *state, k cacheKey) string {
	return st.resolve(k).wl.key
}

func (p *Predictor) estimateMIG(st *state, k cacheKey, typ string, gpus int) sched.Estimate {
	parent, sm, _, _ := gpuspec.MIGShare(typ)
	share, _ := gpuspec.MIGSpeedShare(typ)
	e := p.estimateOn(st, k, parent, gpus)
	src := SrcMIG + "-share"
	if f, ok := st.mig[pairKey{typ, migKeyOf(st, k), ""}]; ok {
		share, src = f, SrcMIG+"-observed"
	}
	e.Throughput *= share
	e.PowerW *= sm
	e.Source = src + "/" + e.Source
	return e
}

// observedMIG collects, per slice type and workload, the geometric mean of slice runs'
// throughput over the parent prediction.
func (p *Predictor) observedMIG(st *state, recs []Record) map[pairKey]float64 {
	means := ratioMeans{}
	for i := range recs {
		r := &recs[i]
		typ, ok := gpuspec.MIGType(r.GPUType)
		if !ok || r.CoRunner != "" || r.Throughput <= 0 || r.Source != SourceObserved || r.Partial {
			continue
		}
		parent, _, _, _ := gpuspec.MIGShare(typ)
		k := cacheKey{f: Features{Family: r.ModelFamily, Name: r.ModelName, BatchSize: r.BatchSize}}
		base := p.estimateOn(st, k, parent, r.GPUs).Throughput
		if base <= 0 {
			continue
		}
		means.add(pairKey{typ, workloadKey(r.ModelName, r.BatchSize), ""}, r.Throughput/base)
	}
	return means.result()
}
