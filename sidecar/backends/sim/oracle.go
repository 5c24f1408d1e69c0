package sim

import (
	"math"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// TablePredictor is a sched.Predictor that answers from the ground-truth throughput table (an
// oracle: the simulator's own speeds) and the datasheet power model at full utilisation. It is
// the reference the real predictor (sidecar/stages/predict) is measured against, and what the
// first-fit baselines use to skip GPU types a job cannot run on.
type TablePredictor struct {
	Table *throughput.Table
	Specs *gpuspec.Table
	Alpha float64
	// CrossNodeEfficiency is the throughput factor of a job spread over nodes where the table
	// has no unconsolidated measurement (the spec's network; DefaultCrossNodeEfficiency when 0).
	CrossNodeEfficiency float64

	// memo, when set (Memoized), remembers every answer: the table never changes, and Gavel
	// asks for every job and type again at each allocation.
	memo *estimateMemo
}

// Predict implements sched.Predictor.
func (p TablePredictor) Predict(job *cluster.Job, gpuType string, gpus int) sched.Estimate {
	if p.memo != nil {
		return p.memo.get(job, gpuType, gpus, false, p.predict)
	}
	return p.predict(job, gpuType, gpus, 1)
}

func (p TablePredictor) predict(job *cluster.Job, gpuType string, gpus, _ int) sched.Estimate {
	jt := throughput.JobType(job.Hetgpu.ModelName, job.Hetgpu.BatchSize)
	v, src, ok := p.Table.Throughput(jt, gpuType, gpus)
	if !ok || v <= 0 {
		return sched.Estimate{Source: "table"}
	}
	e := sched.Estimate{Throughput: v, Source: "table-" + string(src)}
	specs := p.Specs
	if specs == nil {
		specs = gpuspec.Default()
	}
	if s, ok := specs.Lookup(gpuType); ok {
		alpha := p.Alpha
		if alpha == 0 {
			alpha = gpuspec.PowerAlpha
		}
		e.PowerW = float64(gpus) * s.Power(gpuspec.BusyUtil, alpha)
	}
	return e
}

// PredictSpread is Predict for a job spread over nodes nodes: the engine's own rate (the
// table's unconsolidated measurement, else the consolidated one times CrossNodeEfficiency).
// Gavel's allocation uses it (baselines.SpreadPredictor).
func (p TablePredictor) PredictSpread(job *cluster.Job, gpuType string, gpus, nodes int) sched.Estimate {
	if nodes <= 1 {
		return p.Predict(job, gpuType, gpus)
	}
	if p.memo != nil {
		return p.memo.get(job, gpuType, gpus, true, p.predictSpread)
	}
	return p.predictSpread(job, gpuType, gpus, nodes)
}

func (p TablePredictor) predictSpread(job *cluster.Job, gpuType string, gpus, nodes int) sched.Estimate {
	e := p.predict(job, gpuType, gpus, 1)
	if nodes <= 1 || e.Throughput <= 0 {
		return e
	}
	jt := throughput.JobType(job.Hetgpu.ModelName, job.Hetgpu.BatchSize)
	if u, ok := p.Table.Unconsolidated(jt, gpuType, gpus); ok && u > 0 {
		e.Throughput = math.Min(u, e.Throughput)
		return e
	}
	f := p.CrossNodeEfficiency
	if f == 0 {
		f = DefaultCrossNodeEfficiency
	}
	e.Throughput *= f
	return e
}
