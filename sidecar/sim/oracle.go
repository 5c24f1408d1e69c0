package sim

import (
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/throughput"
)

// TablePredictor is a sched.Predictor that answers from the ground-truth throughput table (an
// oracle: the simulator's own speeds) and the datasheet power model at full utilisation. It is
// the reference the real predictor (sidecar/predict) is measured against, and what the
// first-fit baselines use to skip GPU types a job cannot run on.
type TablePredictor struct {
	Table *throughput.Table
	Specs *gpuspec.Table
	Alpha float64
}

// Predict implements sched.Predictor.
func (p TablePredictor) Predict(job *cluster.Job, gpuType string, gpus int) sched.Estimate {
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
