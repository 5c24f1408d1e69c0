package predict

import (
	"math"

	"gonum.org/v1/gonum/mat"
)

// The conditional-Gaussian half of the transfer: a workload's per-GPU log-throughputs over
// the grid slots are taken as jointly Gaussian, with mean and covariance estimated from the
// other workloads measured on all the slots involved (kernel-weighted towards similar
// workloads, shrunk towards the unweighted covariance), and the workload's own runs are
// conditioned on. Unlike the pairwise ratios it uses all of the job's runs at once, so a
// job's type effect and count effect are both read off its own runs. The two estimates
// fail on different jobs (the ratios where a model's batch sizes disagree, the Gaussian
// where few workloads share the job's slots); build combines them by precision.

// Conditional-Gaussian constants (chosen a priori, not tuned per table):
const (
	// cgLocal is the weight of the kernel-weighted covariance against the unweighted one.
	cgLocal = 0.9
	// cgNugget is the log-variance added to every slot: the table's own irregularity.
	cgNugget = 0.01
	// cgMinRows is how many workloads must cover the slots.
	cgMinRows = 3
)

// conditional returns the conditional-Gaussian estimate (log per-GPU throughput and
// variance) of grid slot t for workload self given its own slots, with weights w over the
// workloads; ok is false when fewer than cgMinRows workloads cover the slots. Build-time
// only (it allocates).
func (g *grid) conditional(self int, w []float64, own []ownSlot, runNoise float64, t int) (y, v float64, ok bool) {
	m := 0
	for _, o := range own {
		if o.slot != t {
			m++
		}
	}
	if m == 0 {
		return 0, 0, false
	}
	slots := make([]int, 0, m+1)
	for _, o := range own {
		if o.slot != t {
			slots = append(slots, o.slot)
		}
	}
	slots = append(slots, t)
	d := m + 1
	var rows []int
	for p := range len(w) {
		if p == self {
			continue
		}
		row := g.vals[p*g.stride : (p+1)*g.stride]
		full := true
		for _, s := range slots {
			if math.IsNaN(row[s]) {
				full = false
				break
			}
		}
		if full {
			rows = append(rows, p)
		}
	}
	if len(rows) < cgMinRows {
		return 0, 0, false
	}
	// Weighted (local) and unweighted (global) moments.
	muL, muG := make([]float64, d), make([]float64, d)
	var sw float64
	for _, p := range rows {
		sw += w[p]
	}
	if !(sw > 0) {
		return 0, 0, false
	}
	for _, p := range rows {
		for i, s := range slots {
			x := g.vals[p*g.stride+s]
			muL[i] += w[p] / sw * x
			muG[i] += x / float64(len(rows))
		}
	}
	cov := func(i, j int) float64 {
		var cl, cg float64
		for _, p := range rows {
			row := g.vals[p*g.stride : (p+1)*g.stride]
			cl += w[p] / sw * (row[slots[i]] - muL[i]) * (row[slots[j]] - muL[j])
			cg += (row[slots[i]] - muG[i]) * (row[slots[j]] - muG[j]) / float64(len(rows))
		}
		c := cgLocal*cl + (1-cgLocal)*cg
		if i == j {
			c += cgNugget
		}
		return c
	}
	a := mat.NewSymDense(m, nil)
	r := mat.NewVecDense(m, nil)
	k := mat.NewVecDense(m, nil)
	oi := 0
	for _, o := range own {
		if o.slot == t {
			continue
		}
		r.SetVec(oi, o.y-muL[oi])
		k.SetVec(oi, cov(oi, m))
		oi++
	}
	for i := 0; i < m; i++ {
		for j := i; j < m; j++ {
			a.SetSym(i, j, cov(i, j))
		}
	}
	oi = 0
	for _, o := range own {
		if o.slot == t {
			continue
		}
		a.SetSym(oi, oi, a.At(oi, oi)+runNoise*runNoise/o.runs)
		oi++
	}
	var ch mat.Cholesky
	if !ch.Factorize(a) {
		return 0, 0, false
	}
	var alpha, beta mat.VecDense
	if ch.SolveVecTo(&alpha, r) != nil || ch.SolveVecTo(&beta, k) != nil {
		return 0, 0, false
	}
	y = muL[m] + mat.Dot(k, &alpha)
	v = cov(m, m) - mat.Dot(k, &beta)
	return y, math.Max(v, 1e-4), true
}
