package predict

import (
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
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
	// lrFolds is the number of workload-grouped cross-validation folds.
	lrFolds = 5
	// lrSubsample keeps, when the combination is validated, every lrSubsample-th single
	// cell hold-out of a workload (the transfer it replays is the costly part).
	lrSubsample = 3
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

// lowRank is the completion's matrix with its setting: each workload's completion is a
// local fit of it (lrLocal).
type lowRank struct {
	lrSetting
	// colOf maps a grid slot to its column, -1 when the slot is not a column; cols is each
	// column's slot and colType its GPU type (grid index).
	colOf, cols, colType []int
	nc                   int
	// y is the fitted matrix (rows x nc, NaN missing) and rowWl each row's workload.
	y     []float64
	rowWl []int
	// wls are the catalog's workloads (for the similarity of the local fit).
	wls []workload
	// vals are the grid values it was built from (to reuse it while they do not change).
	vals []float64
}

// lrSetting is what the cross-validation chose and measured: the rank and ridge, the
// fold-in's residual variance and calibration, the validated combination statistics.
type lrSetting struct {
	rank       int
	lambda, s2 float64
	calib      [2]float64
	cv         lrCV
	comb       [2]combStats
}

// lrMatrix gathers the completion's matrix from the grid: the slots with at least
// lrMinColRows workloads as columns, the workloads with at least lrMinRowCells cells in
// them as rows; nil when there are too few of either.
func lrMatrix(g *grid, wls []workload) *lowRank {
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
	if nc < 2 || len(rowWl) < lrMinRows {
		return nil
	}
	colType := make([]int, nc)
	for j, s := range cols {
		colType[j] = s / nBuckets
	}
	return &lowRank{colOf: colOf, cols: cols, colType: colType, nc: nc, y: y, rowWl: rowWl, wls: wls, vals: slices.Clone(g.vals)}
}

// chooseLowRank chooses the completion's setting by workload-grouped cross-validation on
// grid g and validates the combination on the same hold-outs; nil when the grid is too
// small for the completion to say anything. The predictor runs it once, on the catalog's
// seeds: the setting is then the same whatever runs arrive in whatever order (a state
// depends on the records, not on their history), and a run never pays for it.
func chooseLowRank(g *grid, wls []workload, runNoise float64, tc transferConst) *lrSetting {
	lr := lrMatrix(g, wls)
	if lr == nil {
		return nil
	}
	ws := newALSWork()
	best := -1
	var bestCV lrCV
	for ci, c := range lrCandidates {
		if c.rank > 0 && c.rank >= lr.nc {
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
	set := &lrSetting{rank: lrCandidates[best].rank, lambda: lrCandidates[best].lambda, cv: bestCV, s2: bestCV.s2[0]}
	set.calib = [2]float64{bestCV.calib[0] * lrCVS2 / set.s2, bestCV.calib[1] * lrCVS2 / set.s2}
	lr.lrSetting = *set
	set.comb = lr.validateCombination(g, runNoise, tc, ws)
	return set
}

// fitLowRank is the completion over grid g with setting set (prev when it was fitted on
// the same matrix); nil without a setting or when the grid is too small.
func fitLowRank(g *grid, wls []workload, prev *lowRank, set *lrSetting) *lowRank {
	if set == nil {
		return nil
	}
	lr := lrMatrix(g, wls)
	if lr == nil || set.rank > 0 && set.rank >= lr.nc {
		return nil
	}
	if prev != nil && prev.lrSetting == *set && prev.sameFit(lr.colOf, lr.y, lr.rowWl, wls) {
		// A workload without trusted cells appeared, or runs arrived that are not yet
		// trusted: the fitted matrix is the same, and so is every local fit.
		return prev
	}
	lr.lrSetting = *set
	return lr
}

// sameFit reports whether lr was fitted on the same matrix: the same columns and the same
// rows of the same workloads (ids may differ between catalogs), bit for bit.
func (lr *lowRank) sameFit(colOf []int, y []float64, rowWl []int, wls []workload) bool {
	if !slices.Equal(lr.colOf, colOf) || len(lr.rowWl) != len(rowWl) || !sameVals(lr.y, y) {
		return false
	}
	for i, id := range rowWl {
		if lr.wls[lr.rowWl[i]] != wls[id] {
			return false
		}
	}
	return true
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

// crossValidate cross-validates a setting over lrFolds workload-grouped folds (row i in
// fold i mod lrFolds; rows are in key order, so a model's batch sizes spread over the
// folds): the column factors are fitted without the fold's workloads, and each held-out
// workload's cells are hidden one at a time (kind 0) and one GPU type at a time (kind 1),
// the rest of its row folded in and the hidden cells predicted. The folds are fitted
// globally, not around each held-out workload as the estimator is (a tenth of the cost):
// the errors, and so the calibrated variances, are if anything the larger. It returns the
// mean absolute log errors, the residual variances and the factor that calibrates the
// fold-in's predictive variance against the squared errors, per kind; visit, when not nil,
// sees every held-out cell, of every lrSubsample-th single-cell hold-out. The cells left
// in are what a job first seen live brings: one run each, with the run noise added (a
// seeded, reproducible draw per hold-out).
func (lr *lowRank) crossValidate(c lrCandidate, runNoise float64, ws *alsWork, visit lrVisit) lrCV {
	y, nc, colType := lr.y, lr.nc, lr.colType
	nr := len(lr.rowWl)
	var abs, sq, vs [2]float64
	var out lrCV
	held := make([]bool, nc)
	own := make([]lrObs, 0, nc)
	tr := make([]float64, 0, len(y))
	mask := 0
	for f := 0; f < lrFolds; f++ {
		tr = tr[:0]
		for k := 0; k < nr; k++ {
			if k%lrFolds != f {
				tr = append(tr, y[k*nc:(k+1)*nc]...)
			}
		}
		m, _, _, v := alsFit(tr, len(tr)/nc, nc, c.rank, c.lambda, nil, ws)
		fl := &lrLocal{lr: lr, rank: c.rank, lambda: c.lambda, m: m, v: v, s2: lrCVS2, calib: [2]float64{1, 1}}
		for i := f; i < nr; i += lrFolds {
			row := y[i*nc : (i+1)*nc]
			for kind := 0; kind < 2; kind++ {
				for k := 0; k < nc; k++ {
					if math.IsNaN(row[k]) || kind == 1 && slices.Contains(colType[:k], colType[k]) {
						continue // kind 1 holds each type out once
					}
					if visit != nil && kind == 0 && (i+k)%lrSubsample != 0 {
						continue
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
		// The variances above assumed s2 = lrCVS2; the final setting rescales them.
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
}

type alsSys struct {
	// xd, yd are scratch vectors.
	xd, yd []float64
	// ad, bd are a's (upper triangle, row-major, stride d) and b's backing arrays; fd
	// holds a's factor.
	ad, bd, fd []float64
}

func newALSWork() *alsWork {
	ws := &alsWork{}
	for d := 1; d < len(ws.sys); d++ {
		sy := &ws.sys[d]
		sy.ad, sy.bd, sy.fd = make([]float64, d*d), make([]float64, d), make([]float64, d*d)
		sy.xd, sy.yd = make([]float64, d), make([]float64, d)
	}
	return ws
}

// solve solves the d x d system into out (len d); false when it is not positive definite.
// LAPACK's factorisation directly: mat.Cholesky would also estimate the condition number,
// which cost more than the solve for these tiny systems.
func (ws *alsWork) solve(d int, out []float64) bool {
	sy := &ws.sys[d]
	copy(sy.fd, sy.ad)
	t, ok := lapack64.Potrf(blas64.Symmetric{Uplo: blas.Upper, N: d, Stride: d, Data: sy.fd})
	if !ok {
		return false
	}
	copy(out[:d], sy.bd)
	lapack64.Potrs(t, blas64.General{Rows: d, Cols: 1, Stride: 1, Data: out[:d]})
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
	// t is the Cholesky factor of the precision, over fd.
	t  blas64.Triangular
	fd []float64
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
	f := &lrFold{theta: make([]float64, d), fd: make([]float64, d*d)}
	if !ws.solve(d, f.theta) {
		return nil, false
	}
	copy(f.fd, ws.sys[d].ad)
	t, ok := lapack64.Potrf(blas64.Symmetric{Uplo: blas.Upper, N: d, Stride: d, Data: f.fd})
	if !ok {
		return nil, false
	}
	f.t = t
	return f, true
}

// at is the folded workload's log-throughput on column j and its calibrated variance; kind
// is 1 when the workload has no cell of its own on the column's GPU type.
func (fl *lrLocal) at(f *lrFold, j, kind int, ws *alsWork) (y, v float64) {
	d, r := fl.rank+1, fl.rank
	x, b := ws.sys[d].xd, ws.sys[d].yd
	x[0] = 1
	y = fl.m[j] + f.theta[0]
	for k := 1; k < d; k++ {
		x[k] = fl.v[j*r+k-1]
		y += f.theta[k] * x[k]
	}
	copy(b, x)
	lapack64.Potrs(f.t, blas64.General{Rows: d, Cols: 1, Stride: 1, Data: b})
	var q float64
	for k := 0; k < d; k++ {
		q += x[k] * b[k]
	}
	return y, fl.calib[kind] * (q + fl.s2)
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
