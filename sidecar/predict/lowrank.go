package predict

import (
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// The low-rank completion half of P2 (as in Quasar): the catalog's per-GPU log-throughputs
// form a matrix with a row per workload and a column per (GPU type, GPU-count doubling)
// slot, modelled as
//
//	y[i,j] = m[j] + a[i] + u[i]·v[j] + noise
//
// (column level, workload level, rank-r interaction), fitted by regularised alternating
// least squares on the trusted entries. Gavel's table shows why the fit is local: the
// interactions of a workload are best told by similar workloads (the same model at other
// batch sizes), so each workload's completion weighs the catalog's rows by the same
// similarity kernel as the transfer, with a floor that keeps the global structure. The
// workload's own runs are then folded into the column factors (a small ridge regression)
// and every slot read off.
//
// The rank and the ridge are chosen by workload-grouped cross-validation over the catalog's
// own rows: whole workloads are held out, their rows folded into the factors fitted without
// them from all but one cell (or all but one GPU type), and the hidden cells predicted. The
// same held-out residuals calibrate the predictive variance per kind of hold-out, so the
// uncertainty P2 weighs the completion by is validated, not assumed. All of it runs when
// the state is built, never on a prediction.

// Low-rank constants (chosen a priori, not tuned per table).
const (
	// lrMinColRows is how many workloads a slot needs to become a column.
	lrMinColRows = 3
	// lrMinRowCells is how many cells a workload needs to become a row of the fit, and
	// lrMinRows how many rows the completion needs.
	lrMinRowCells = 2
	lrMinRows     = 6
	// lrIters is the number of alternating least-squares sweeps.
	lrIters = 25
	// lrLevelRidge keeps the (unpenalised) levels a and m well defined.
	lrLevelRidge = 1e-6
	// lrVarFloor is the smallest residual variance the fold-in assumes.
	lrVarFloor = 1e-4
	// lrTau is the similarity kernel's length of the local fit and lrFloor the weight
	// every row keeps.
	lrTau   = 2 * kernelTau
	lrFloor = 0.05
	// lrResetFrac is how much the fitted rows may grow or shrink before the setting is
	// chosen again; below it only the factors are refitted, with the setting kept.
	lrResetFrac = 0.1
	// lrCVS2 is the residual variance the cross-validation folds in with; the calibration
	// rescales the variance it gives.
	lrCVS2 = 0.01
)

// lrCandidate is one (rank, ridge) setting the cross-validation compares.
type lrCandidate struct {
	rank   int
	lambda float64
}

// lrCandidates are the settings compared; rank 0 is the additive model (a workload level
// plus a slot level: the single-ratio carry), which needs no ridge.
var lrCandidates = [...]lrCandidate{{0, 0}, {1, 0.03}, {2, 0.03}, {2, 0.1}, {3, 0.03}, {3, 0.1}}

// lrMaxRank is the largest rank among lrCandidates.
const lrMaxRank = 3

// lowRank is a fitted completion model over grid slots.
type lowRank struct {
	// colOf maps a grid slot to its column, -1 when the slot is not a column; cols is each
	// column's slot and colType its GPU type (grid index).
	colOf, cols, colType []int
	nc                   int
	rank                 int
	// lambda is the ridge on the interaction factors; s2 the cross-validated residual
	// variance of a noise-free fold-in and calib the factor that makes the fold-in's
	// predictive variance match the held-out squared errors.
	lambda, s2 float64
	calib      [2]float64
	// y is the fitted matrix (rows x nc, NaN missing) and rowWl each row's workload.
	y     []float64
	rowWl []int
	// wls are the catalog's workloads (for the similarity of the local fit).
	wls []workload
	// cv is the chosen setting's cross-validation; vals the grid values it was fitted on
	// (to reuse it while they do not change).
	cv   lrCV
	vals []float64
	// comb are the validated statistics P2's combination weighs its estimators by, per
	// kind of hold-out (p2combine.go).
	comb [2]combStats
}

// fitLowRank chooses the setting by grouped cross-validation (or keeps prev's, when prev
// was fitted on about as many rows and the same columns) over the grid of index ix; nil
// when the grid has too few rows or columns for the completion to say anything.
func fitLowRank(g *grid, wls []workload, prev *lowRank, runNoise float64, tc transferConst) *lowRank {
	nw := len(g.vals) / g.stride
	colOf := make([]int, g.stride)
	var cols []int
	for s := 0; s < g.stride; s++ {
		colOf[s] = -1
		n := 0
		for w := 0; w < nw; w++ {
			if !math.IsNaN(g.vals[w*g.stride+s]) {
				n++
			}
		}
		if n >= lrMinColRows {
			colOf[s] = len(cols)
			cols = append(cols, s)
		}
	}
	nc := len(cols)
	var y []float64
	var rowWl []int
	for w := 0; w < nw; w++ {
		row := make([]float64, nc)
		n := 0
		for j, s := range cols {
			row[j] = g.vals[w*g.stride+s]
			if !math.IsNaN(row[j]) {
				n++
			}
		}
		if n >= lrMinRowCells {
			y = append(y, row...)
			rowWl = append(rowWl, w)
		}
	}
	nr := len(rowWl)
	if nc < 2 || nr < lrMinRows {
		return nil
	}
	colType := make([]int, nc)
	for j, s := range cols {
		colType[j] = s / nBuckets
	}
	lr := &lowRank{colOf: colOf, cols: cols, colType: colType, nc: nc, y: y, rowWl: rowWl, wls: wls, vals: slices.Clone(g.vals)}
	if prev != nil && prev.nc == nc && slices.Equal(prev.colOf, colOf) &&
		math.Abs(float64(nr-len(prev.rowWl))) <= lrResetFrac*float64(len(prev.rowWl)) {
		lr.rank, lr.lambda, lr.s2, lr.calib, lr.cv, lr.comb = prev.rank, prev.lambda, prev.s2, prev.calib, prev.cv, prev.comb
		return lr
	}
	ws := newALSWork()
	best := -1
	var bestCV lrCV
	for ci, c := range lrCandidates {
		if c.rank > 0 && c.rank >= nc {
			continue
		}
		cv := lr.crossValidate(c, runNoise, ws, nil)
		if best < 0 || cv.score() < bestCV.score() {
			best, bestCV = ci, cv
		}
	}
	// The fold-in weighs cells by the kind-0 residual variance (the completion's own
	// error where the row says most), and the calibration maps its predictive variance
	// to each kind's held-out squared errors.
	lr.rank, lr.lambda, lr.cv = lrCandidates[best].rank, lrCandidates[best].lambda, bestCV
	lr.s2 = bestCV.s2[0]
	lr.calib = [2]float64{bestCV.calib[0] * lrCVS2 / lr.s2, bestCV.calib[1] * lrCVS2 / lr.s2}
	lr.comb = lr.validateCombination(g, runNoise, tc, ws)
	return lr
}

// rowWeights fills w (one per fitted row) with the local fit's weights for workload q.
func (lr *lowRank) rowWeights(q *workload, w []float64) {
	for i, id := range lr.rowWl {
		w[i] = lrFloor + math.Exp(-distance(q, &lr.wls[id])/lrTau)
	}
}

// lrCV is a setting's cross-validated errors, by whether the workload had cells of its
// own on the held-out cell's GPU type (kind 0) or none (kind 1: a type it never ran on).
type lrCV struct {
	mae, s2, calib [2]float64
	n              [2]int
}

// score is what the setting is chosen by: both kinds weigh equally.
func (c *lrCV) score() float64 { return (c.mae[0] + c.mae[1]) / 2 }

// lrVisit receives one held-out cell of the cross-validation: the row, a number that
// identifies the hold-out (the same for every cell hidden together), the cells left in,
// the hidden column, its value, the prediction and its uncalibrated variance, and the kind.
type lrVisit func(row, mask int, own []lrObs, col int, truth, pred, pv float64, kind int)

// crossValidate cross-validates a setting, leaving one workload out at a time (grouped by
// workload: every cell of the held-out workload is unseen by the fit): its cells are hidden
// one at a time (kind 0) and one GPU type at a time (kind 1), the rest of its row folded
// into the column factors fitted without it, and the hidden cells predicted. It returns the
// mean absolute log errors, the residual variances and the factor that calibrates the
// fold-in's predictive variance against the squared errors, per kind; visit, when not nil,
// sees every held-out cell. The cells left in are what a job first seen live brings: one
// run each, with the run noise added (a seeded, reproducible draw per hold-out).
func (lr *lowRank) crossValidate(c lrCandidate, runNoise float64, ws *alsWork, visit lrVisit) lrCV {
	y, nc, colType := lr.y, lr.nc, lr.colType
	nr := len(lr.rowWl)
	var abs, sq, vs [2]float64
	var out lrCV
	held := make([]bool, nc)
	own := make([]lrObs, 0, nc)
	tr := make([]float64, 0, len(y))
	all := make([]float64, nr)
	rw := make([]float64, 0, nr)
	mask := 0
	for i := 0; i < nr; i++ {
		tr, rw = tr[:0], rw[:0]
		lr.rowWeights(&lr.wls[lr.rowWl[i]], all)
		for k := 0; k < nr; k++ {
			if k != i {
				tr = append(tr, y[k*nc:(k+1)*nc]...)
				rw = append(rw, all[k])
			}
		}
		m, _, _, v := alsFit(tr, len(rw), nc, c.rank, c.lambda, rw, ws)
		fl := &lrLocal{lr: lr, rank: c.rank, lambda: c.lambda, m: m, v: v, s2: lrCVS2, calib: [2]float64{1, 1}}
		{
			row := y[i*nc : (i+1)*nc]
			for kind := 0; kind < 2; kind++ {
				for k := 0; k < nc; k++ {
					if math.IsNaN(row[k]) || kind == 1 && slices.Contains(colType[:k], colType[k]) {
						continue // kind 1 holds each type out once
					}
					for j := range held {
						held[j] = j == k || kind == 1 && colType[j] == colType[k]
					}
					own = own[:0]
					rng := rand.New(rand.NewPCG(uint64(i), uint64(kind*nc+k)))
					for j := range row {
						if !held[j] && !math.IsNaN(row[j]) {
							own = append(own, lrObs{col: j, y: row[j] + runNoise*rng.NormFloat64(), runs: 1})
						}
					}
					if len(own) == 0 {
						continue
					}
					th, ok := fl.foldIn(own, runNoise, ws)
					if !ok {
						continue
					}
					mask++
					for j := range row {
						if !held[j] || math.IsNaN(row[j]) {
							continue
						}
						// A kind-0 hold-out whose row has no other cell on the type is kind 1.
						kd := kind
						if kind == 0 && !ownHasType(own, colType, colType[j]) {
							kd = 1
						}
						p, pv := fl.at(th, j, kd, ws)
						r := row[j] - p
						abs[kd] += math.Abs(r)
						sq[kd] += r * r
						vs[kd] += pv
						out.n[kd]++
						if visit != nil {
							visit(i, mask, own, j, row[j], p, pv, kd)
						}
					}
				}
			}
		}
	}
	for kd := range out.mae {
		if out.n[kd] == 0 {
			out.mae[kd], out.s2[kd], out.calib[kd] = math.Inf(1), 1, 1
			continue
		}
		n := float64(out.n[kd])
		out.mae[kd] = abs[kd] / n
		out.s2[kd] = math.Max(sq[kd]/n, lrVarFloor)
		// The variances above assumed s2 = lrCVS2; the fold-in's mean does not depend on
		// it (noise-free cells), its variance scales with it.
		out.calib[kd] = sq[kd] / math.Max(vs[kd], 1e-12)
	}
	return out
}

func ownHasType(own []lrObs, colType []int, t int) bool {
	for _, o := range own {
		if colType[o.col] == t {
			return true
		}
	}
	return false
}

// lrObs is one own cell of a workload for the fold-in.
type lrObs struct {
	col  int
	y    float64
	runs float64
}

// alsWork holds the reusable small systems of the fit and fold-in, one per system size
// (rank + 1), written through their backing arrays.
type alsWork struct {
	sys [lrMaxRank + 2]alsSys
	ch  mat.Cholesky
}

type alsSys struct {
	a    *mat.SymDense
	b, x *mat.VecDense
	// ad, bd are a's (upper triangle, row-major, stride d) and b's backing arrays.
	ad, bd []float64
}

func newALSWork() *alsWork {
	ws := &alsWork{}
	for d := 1; d < len(ws.sys); d++ {
		sy := &ws.sys[d]
		sy.ad, sy.bd = make([]float64, d*d), make([]float64, d)
		sy.a, sy.b, sy.x = mat.NewSymDense(d, sy.ad), mat.NewVecDense(d, sy.bd), mat.NewVecDense(d, nil)
	}
	return ws
}

// solve solves the d x d system into out (len d); false when it is not positive definite.
func (ws *alsWork) solve(d int, out []float64) bool {
	sy := &ws.sys[d]
	if !ws.ch.Factorize(sy.a) {
		return false
	}
	if err := ws.ch.SolveVecTo(sy.x, sy.b); err != nil {
		return false
	}
	for k := 0; k < d; k++ {
		out[k] = sy.x.AtVec(k)
	}
	return true
}

// alsFit fits y (nr x nc, NaN missing) = m[j] + a[i] + u[i]·v[j] with a ridge lambda on u
// and v by alternating least squares, started from the leading singular vectors of the
// residual after the levels. Deterministic.
func alsFit(y []float64, nr, nc, rank int, lambda float64, rowW []float64, ws *alsWork) (m, a, u, v []float64) {
	m, a = make([]float64, nc), make([]float64, nr)
	u, v = make([]float64, nr*rank), make([]float64, nc*rank)
	// Levels: column means, then row means of what is left.
	for j := 0; j < nc; j++ {
		var s, n float64
		for i := 0; i < nr; i++ {
			if x := y[i*nc+j]; !math.IsNaN(x) {
				s += x
				n++
			}
		}
		if n > 0 {
			m[j] = s / n
		}
	}
	for i := 0; i < nr; i++ {
		var s, n float64
		for j := 0; j < nc; j++ {
			if x := y[i*nc+j]; !math.IsNaN(x) {
				s += x - m[j]
				n++
			}
		}
		if n > 0 {
			a[i] = s / n
		}
	}
	if rank > 0 {
		r := mat.NewDense(nr, nc, nil)
		for i := 0; i < nr; i++ {
			for j := 0; j < nc; j++ {
				if x := y[i*nc+j]; !math.IsNaN(x) {
					r.Set(i, j, x-m[j]-a[i])
				}
			}
		}
		var svd mat.SVD
		if svd.Factorize(r, mat.SVDThin) {
			var vm mat.Dense
			svd.VTo(&vm)
			sv := svd.Values(nil)
			for j := 0; j < nc; j++ {
				for k := 0; k < rank && k < len(sv); k++ {
					v[j*rank+k] = vm.At(j, k) * math.Sqrt(sv[k])
				}
			}
		}
	}
	d := rank + 1
	th := make([]float64, d)
	for it := 0; it < lrIters; it++ {
		// Rows: [a_i, u_i] given m, v.
		for i := 0; i < nr; i++ {
			ws.reset(d, lambda)
			for j := 0; j < nc; j++ {
				x := y[i*nc+j]
				if math.IsNaN(x) {
					continue
				}
				ws.accumulate(d, v[j*rank:j*rank+rank], x-m[j], 1)
			}
			if ws.solve(d, th) {
				a[i] = th[0]
				copy(u[i*rank:i*rank+rank], th[1:])
			}
		}
		if rank == 0 && it >= 3 {
			break // the additive model converges in a few sweeps
		}
		// Columns: [m_j, v_j] given a, u.
		for j := 0; j < nc; j++ {
			ws.reset(d, lambda)
			for i := 0; i < nr; i++ {
				x := y[i*nc+j]
				if math.IsNaN(x) {
					continue
				}
				w := 1.0
				if rowW != nil {
					w = rowW[i]
				}
				ws.accumulate(d, u[i*rank:i*rank+rank], x-a[i], w)
			}
			if ws.solve(d, th) {
				m[j] = th[0]
				copy(v[j*rank:j*rank+rank], th[1:])
			}
		}
	}
	return m, a, u, v
}

// reset zeroes the d x d system and puts the ridge on its diagonal: lrLevelRidge on the
// level, lambda on the factors.
func (ws *alsWork) reset(d int, lambda float64) {
	sy := &ws.sys[d]
	clear(sy.ad)
	clear(sy.bd)
	sy.ad[0] = lrLevelRidge
	for k := 1; k < d; k++ {
		sy.ad[k*d+k] = lambda
	}
}

// accumulate adds one observation t = [1, f]·theta with weight w to the normal equations
// (upper triangle only: SymDense reads no other).
func (ws *alsWork) accumulate(d int, f []float64, t, w float64) {
	sy := &ws.sys[d]
	sy.bd[0] += w * t
	sy.ad[0] += w
	for l := 1; l < d; l++ {
		sy.ad[l] += w * f[l-1]
	}
	for k := 1; k < d; k++ {
		wf := w * f[k-1]
		sy.bd[k] += wf * t
		row := sy.ad[k*d : k*d+d]
		for l := k; l < d; l++ {
			row[l] += wf * f[l-1]
		}
	}
}

// lrLocal is the completion fitted for one workload: the column levels and factors of the
// rows weighted by their similarity to it, with the setting and calibration of lr.
type lrLocal struct {
	lr         *lowRank
	rank       int
	lambda, s2 float64
	calib      [2]float64
	m, v       []float64
}

// local fits the completion around workload q.
func (lr *lowRank) local(q *workload, ws *alsWork) *lrLocal {
	w := make([]float64, len(lr.rowWl))
	lr.rowWeights(q, w)
	m, _, _, v := alsFit(lr.y, len(lr.rowWl), lr.nc, lr.rank, lr.lambda, w, ws)
	return &lrLocal{lr: lr, rank: lr.rank, lambda: lr.lambda, s2: lr.s2, calib: lr.calib, m: m, v: v}
}

// lrFold is a workload folded into the column factors: its level and interaction factors
// and the Cholesky factor of its posterior precision (for the predictive variance).
type lrFold struct {
	theta []float64
	ch    mat.Cholesky
}

// foldIn solves a workload's [a, u] from its own cells, each weighted by the inverse of the
// residual variance plus its runs' noise, in units where the ridge is lambda/s2 (the fit's
// ridge with s2 as the noise variance).
func (fl *lrLocal) foldIn(own []lrObs, runNoise float64, ws *alsWork) (*lrFold, bool) {
	d, r := fl.rank+1, fl.rank
	ws.reset(d, fl.lambda/fl.s2)
	ws.sys[d].ad[0] = lrLevelRidge / fl.s2
	for _, o := range own {
		w := 1 / (fl.s2 + runNoise*runNoise/o.runs)
		ws.accumulate(d, fl.v[o.col*r:o.col*r+r], o.y-fl.m[o.col], w)
	}
	f := &lrFold{theta: make([]float64, d)}
	if !ws.solve(d, f.theta) {
		return nil, false
	}
	if !f.ch.Factorize(ws.sys[d].a) {
		return nil, false
	}
	return f, true
}

// at is the folded workload's log-throughput on column j and its calibrated variance; kind
// is 1 when the workload has no cell of its own on the column's GPU type.
func (fl *lrLocal) at(f *lrFold, j, kind int, ws *alsWork) (y, v float64) {
	d, r := fl.rank+1, fl.rank
	x, b := ws.sys[d].x, ws.sys[d].b
	x.SetVec(0, 1)
	y = fl.m[j] + f.theta[0]
	for k := 1; k < d; k++ {
		x.SetVec(k, fl.v[j*r+k-1])
		y += f.theta[k] * fl.v[j*r+k-1]
	}
	if err := f.ch.SolveVecTo(b, x); err != nil {
		return y, math.Inf(1)
	}
	return y, fl.calib[kind] * (mat.Dot(x, b) + fl.s2)
}

// estimates fits the completion around workload q, folds its own grid slots in and returns
// its estimate on every grid slot (v = +Inf where the slot is not a column). Build-time
// only.
func (lr *lowRank) estimates(q *workload, own []ownSlot, runNoise float64, stride int, ws *alsWork) []trEst {
	out := make([]trEst, stride)
	for i := range out {
		out[i] = trEst{v: math.Inf(1)}
	}
	obs := make([]lrObs, 0, len(own))
	for _, o := range own {
		if j := lr.colOf[o.slot]; j >= 0 {
			obs = append(obs, lrObs{col: j, y: o.y, runs: o.runs})
		}
	}
	if len(obs) == 0 {
		return out
	}
	fl := lr.local(q, ws)
	f, ok := fl.foldIn(obs, runNoise, ws)
	if !ok {
		return out
	}
	for s, j := range lr.colOf {
		if j >= 0 {
			kind := 1
			if ownHasType(obs, lr.colType, lr.colType[j]) {
				kind = 0
			}
			out[s].y, out[s].v = fl.at(f, j, kind, ws)
		}
	}
	return out
}
