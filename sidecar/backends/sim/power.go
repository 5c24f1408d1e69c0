// Power and energy accounting: each GPU's draw from its jobs' utilisation, each job's share,
// and the cluster time series.

package sim

import (
	"math"
)

// updatePower recomputes the power of a job's GPUs and its own power share.
func (e *Engine) updatePower(j *JobState) {
	for _, r := range j.Placement.GPUs {
		e.gpuPower(r)
	}
	j.powerW = e.powerShare(j)
}

// gpuPower recomputes one GPU's utilisation and draw from its holders, and the power shares
// of the running jobs on it.
func (e *Engine) gpuPower(r GPURef) {
	n := e.nodes[r.Node]
	s := &n.gpus[r.Index]
	u := 0.0
	for i := 0; i < s.n; i++ {
		u += s.holders[i].util
	}
	u = math.Min(1, u)
	w := n.spec.Power(u, e.cfg.Spec.Power.Alpha)
	e.powerW += w - s.powerW
	s.util, s.powerW = u, w
	// Partners' power shares change with the GPU's power.
	for i := 0; i < s.n; i++ {
		h := s.holders[i]
		if h.Status == StatusRunning {
			e.settle(h)
			h.powerW = e.powerShare(h)
		}
	}
}

// powerShare is a job's share of the draw of its GPUs: each GPU's power split evenly among
// its holders.
func (e *Engine) powerShare(j *JobState) float64 {
	p := 0.0
	for _, r := range j.Placement.GPUs {
		s := &e.nodes[r.Node].gpus[r.Index]
		if s.n > 0 {
			p += s.powerW / float64(s.n)
		}
	}
	return p
}

func (e *Engine) sample() {
	if e.cfg.NoSeries || !e.started {
		return
	}
	s := Sample{T: e.now, BusyGPUs: e.busyGPUs, Queue: e.nPending, Running: len(e.running), PowerW: e.powerW}
	if k := len(e.series); k > 0 && e.series[k-1].T == s.T {
		e.series[k-1] = s
		return
	}
	e.series = append(e.series, s)
}
