// Job speeds: isolated throughput per (job type, GPU type, GPU count, spread) and the
// interference of co-located jobs.

package sim

import (
	"container/heap"
	"math"
)

// rate is the isolated steps/s of a job type on n GPUs of a type, consolidated or spread; 0 when
// infeasible or unknown.
func (e *Engine) rate(jobType, gpuType string, n int, spread bool) float64 {
	k := rateKey{jobType, gpuType, n, spread}
	if v, ok := e.rates[k]; ok {
		return v
	}
	v, _, ok := e.cfg.Throughput.Throughput(jobType, gpuType, n)
	if mv, mig := e.migRate(jobType, gpuType, n); mig {
		v, ok = mv, true
	}
	if !ok || !(v > 0) {
		v = 0
	}
	if spread && v > 0 {
		if u, ok := e.cfg.Throughput.Unconsolidated(jobType, gpuType, n); ok && u > 0 {
			v = math.Min(u, v)
		} else {
			v *= e.cfg.Spec.Network.CrossNodeEfficiency
		}
	}
	e.rates[k] = v
	return v
}

// minNodes is the fewest nodes of a type that hold n GPUs, or 0 if the type cannot host n.
func (e *Engine) minNodes(gpuType string, n int) int {
	per := e.classMaxPerNod[gpuType]
	if per == 0 || e.typeTotal[gpuType] < n {
		return 0
	}
	return (n + per - 1) / per
}

// refresh recomputes a running job's rate and util contribution from its placement and
// partners, and repositions it in the completion heap.
func (e *Engine) refresh(j *JobState) {
	base := e.rate(j.JobType, j.GPUType, j.GPUs, j.Nodes > 1)
	j.Rate = base * e.colocationFactor(j)
	j.util = e.utilOf(j)
	if j.heapIdx >= 0 {
		heap.Fix(&e.completions, j.heapIdx)
	} else {
		heap.Push(&e.completions, j)
	}
}

// colocationFactor is the fraction of its isolated speed a running job keeps beside the jobs
// sharing its GPUs: the worst pair over its GPUs (the table's pair throughput, else time-sliced
// at one half), 1 when it shares none. It records the worst co-runner on the job.
func (e *Engine) colocationFactor(j *JobState) float64 {
	factor := 1.0
	for _, r := range j.Placement.GPUs {
		s := &e.nodes[r.Node].gpus[r.Index]
		if s.n < 2 {
			continue
		}
		other := s.holders[0]
		if other == j {
			other = s.holders[1]
		}
		if f := e.pairFactor(j, other); f < factor {
			factor = f
			j.coRunner, j.coBatch = other.Model, other.BatchSize
		}
	}
	return factor
}

// pairFactor is j's speed beside other relative to alone: measured where the throughput table
// has the pair, else 0.5 (time-sliced).
func (e *Engine) pairFactor(j, other *JobState) float64 {
	if a, _, ok := e.cfg.Throughput.Colocated(j.GPUType, j.JobType, j.GPUs, other.JobType, other.GPUs); ok {
		if iso, ok := e.cfg.Throughput.Measured(j.JobType, j.GPUType, j.GPUs); ok && iso > 0 {
			return a / iso
		}
	}
	return 0.5
}

// utilOf is the utilisation a running job contributes to each of its GPUs: busy_util x its
// multi-GPU scaling efficiency x its slowdown against running alone consolidated.
func (e *Engine) utilOf(j *JobState) float64 {
	cons := e.rate(j.JobType, j.GPUType, j.GPUs, false)
	one := e.rate(j.JobType, j.GPUType, 1, false)
	eff := 1.0
	if one > 0 && j.GPUs > 1 {
		eff = math.Min(1, cons/(float64(j.GPUs)*one))
	}
	slow := 1.0
	if cons > 0 {
		slow = math.Min(1, j.Rate/cons)
	}
	return e.cfg.Spec.Power.BusyUtil * eff * slow
}
