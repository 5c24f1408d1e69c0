package predict

import "math"

// P2's combination. Its estimators (P1 corrected by the residual posterior, the job's runs
// carried over by the transfer, the low-rank completion) err on the same cells: weighting
// them by their stated precision alone, as if independent, lets a confident but
// correlated member pull the combination past the best of them (on Gavel's table the
// transfer states a variance 4-6 times below its held-out squared error). So:
//
//   - the transfer and the completion are mixed with the weight that minimised the squared
//     error of the mix on the catalog's own hold-outs (workload-grouped folds of the seeds, the
//     same hold-outs that choose the completion's rank), per kind of hold-out (the job has
//     run on the type, or not), provided the mix beats the transfer there beyond doubt
//     (rowGain, mixT); else the transfer (or the completion, if it alone beats the transfer
//     so) stands alone. The mix's variance is the validated
//     one (each member's variance calibrated against those errors, with their measured
//     correlation);
//   - the residual posterior joins by generalised least squares (an assumed correlation
//     rhoPost) only where the job has runs of its own on the slot itself, which the
//     transfer leaves out by construction; elsewhere its figure is P1's level, corrected by
//     the same runs the other two carry better (it was the weakest member on every table
//     and protocol measured), and without them it is the estimate.
//
// A member whose generalised least-squares weight would come out negative is dropped, so
// the result is a convex combination and cannot claim more certainty than the members'
// shared error allows.

// combStats are the validated error statistics of the transfer and the completion on one
// kind of hold-out (see lrCV): the factor that calibrates the transfer's variance, and the
// correlation of the two members' standardised errors.
type combStats struct {
	calTr, rho float64
	// wTr is the transfer's weight in its mix with the completion; maeTr, maeLr and maeMix
	// the validated mean absolute log errors of the two members and of their mix.
	wTr                  float64
	maeTr, maeLr, maeMix float64
	n                    int
	// The roofline member (roofline.go) on the hold-outs where it has an estimate (nRf):
	// calRf calibrates its stated variance, rhoRf is the correlation of its errors with
	// the mix's above, wRf its weight against that mix (0 unless the hold-outs show the
	// mix with it better beyond doubt), maeRf its mean absolute log error and maeMixRf
	// the mix's on the same cells, gainRf the t statistic of the gain.
	calRf, rhoRf, wRf float64
	maeRf, maeMixRf   float64
	gainRf            float64
	nRf               int
}

// rhoPost is the correlation assumed between the residual posterior's errors and the
// others'. The posterior's P1 is trained on the catalog's rows, so they cannot validate it;
// its variance is the out-of-fold one Train measured, and the correlation is the lower end
// of what the reference limits measured on Gavel's table (0.74-0.98).
const rhoPost = 0.75

// mixT is how many standard errors the validated gain of the completion (or of the mix)
// over the transfer must reach to be used.
const mixT = 2.0

// rfT is the same for the roofline's gain over the mix the first gate left. It is a
// second test on the same hold-outs, and at 2 standard errors it admitted the roofline in
// 5 of 26 evaluation folds of Gavel's table at the margin (mean t -1.65), which cost 0.5 %
// on protocol (b) for seed 3 (docs/results/predictor.md): it was raised to 3 after that
// measurement.
const rfT = 3.0

// rowGain returns the t statistic of the mean per-row difference d over the rows that have
// cells (n cells, each mapped by at to its row and difference); 0 with fewer than 3 rows.
func rowGain(rows, n int, at func(i int) (row int, d float64)) float64 {
	sum, cnt := make([]float64, rows), make([]float64, rows)
	for i := 0; i < n; i++ {
		r, d := at(i)
		sum[r] += d
		cnt[r]++
	}
	var m, m2, k float64
	for r := range sum {
		if cnt[r] > 0 {
			x := sum[r] / cnt[r]
			m += x
			m2 += x * x
			k++
		}
	}
	if k < 3 {
		return 0
	}
	m /= k
	sd := math.Sqrt(math.Max(m2/k-m*m, 0) * k / (k - 1))
	if sd == 0 {
		return 0
	}
	return m / (sd / math.Sqrt(k))
}

// defaultComb is used before any validation (a catalog too small for the completion):
// the transfer as stated, alone.
func defaultComb() combStats { return combStats{calTr: 1, rho: rhoPost, wTr: 1, calRf: 1} }

// validateCombination replays the completion's cross-validation hold-outs through the
// transfer (which never reads the held-out workload's own row: it is left out of the
// kernel ratios, the interpolation and the conditional Gaussian by construction) and
// measures, per kind, the transfer's variance calibration and the two members' error
// correlation.
func (lr *lowRank) validateCombination(g *grid, runNoise float64, tc transferConst, ws *alsWork) [2]combStats {
	w := make([]float64, len(lr.wls))
	own := make([]ownSlot, 0, lr.nc)
	var tr []trEst
	rf := make([]trEst, g.stride)
	last, lastRow := -1, -1
	var r2, v, zz, tt, ll, at, al, atl [2]float64
	type pair struct {
		rt, rl float64
		row    int
		// rr and vr are the roofline's residual and stated variance; hasRf whether it
		// had an estimate.
		rr, vr float64
		hasRf  bool
	}
	var res [2][]pair
	var n [2]int
	lr.crossValidate(lrCandidate{lr.rank, lr.lambda}, runNoise, ws, func(row, mask int, obs []lrObs, col int, truth, pred, pv float64, kind int) {
		id := lr.rowWl[row]
		if row != lastRow {
			kernelWeights(lr.wls, id, w)
			lastRow = row
		}
		if mask != last {
			own = own[:0]
			for _, o := range obs {
				own = append(own, ownSlot{slot: lr.cols[o.col], y: o.y, runs: o.runs})
			}
			tr = g.transfer(id, w, own, runNoise, tc)
			g.rooflineTo(rf, id, w, own, runNoise)
			last = mask
		}
		slot := lr.cols[col]
		e := g.carryCG(id, w, own, runNoise, slot, tr[slot])
		if math.IsInf(e.v, 1) || !(e.v > 0) {
			return
		}
		rt, rl := truth-e.y, truth-pred
		lv := lr.cv.calib[kind] * pv
		r2[kind] += rt * rt
		v[kind] += e.v
		at[kind] += rt * rt
		al[kind] += rl * rl
		atl[kind] += rt * rl
		pr := pair{rt: rt, rl: rl, row: row}
		if f := rf[slot]; !math.IsInf(f.v, 1) {
			pr.rr, pr.vr, pr.hasRf = truth-f.y, f.v, true
		}
		res[kind] = append(res[kind], pr)
		zt, zl := rt/math.Sqrt(e.v), rl/math.Sqrt(lv)
		zz[kind] += zt * zl
		tt[kind] += zt * zt
		ll[kind] += zl * zl
		n[kind]++
	})
	var out [2]combStats
	for k := range out {
		out[k] = defaultComb()
		if n[k] < 10 {
			continue
		}
		// The mix weight minimising sum((w rt + (1-w) rl)^2), within [0, 1].
		wt := 0.5
		if d := at[k] + al[k] - 2*atl[k]; d > 0 {
			wt = math.Max(0, math.Min(1, (al[k]-atl[k])/d))
		}
		out[k] = combStats{calTr: math.Max(r2[k]/v[k], 0.1), rho: math.Max(0, math.Min(0.95, zz[k]/math.Sqrt(tt[k]*ll[k]))), wTr: wt, n: n[k]}
		for _, p := range res[k] {
			out[k].maeTr += math.Abs(p.rt) / float64(n[k])
			out[k].maeLr += math.Abs(p.rl) / float64(n[k])
			out[k].maeMix += math.Abs(wt*p.rt+(1-wt)*p.rl) / float64(n[k])
		}
		// The transfer (P2's established member) stands alone unless the hold-outs show the
		// completion or the mix better beyond doubt: by a paired comparison over the
		// held-out workloads (cells of one workload are not independent), a mean gain at
		// least mixT standard errors from zero.
		c := &out[k]
		mix := c.wTr
		gainLr := rowGain(len(lr.rowWl), len(res[k]), func(i int) (int, float64) {
			return res[k][i].row, math.Abs(res[k][i].rl) - math.Abs(res[k][i].rt)
		})
		gainMix := rowGain(len(lr.rowWl), len(res[k]), func(i int) (int, float64) {
			p := res[k][i]
			return p.row, math.Abs(mix*p.rt+(1-mix)*p.rl) - math.Abs(p.rt)
		})
		switch {
		case gainMix < -mixT && gainMix <= gainLr:
		case gainLr < -mixT:
			c.wTr, c.maeMix = 0, c.maeLr
		default:
			c.wTr, c.maeMix = 1, c.maeTr
		}
		// The roofline against the mix the gate left, on the hold-outs where it has an
		// estimate: its variance calibration, the correlation of the two errors, and its
		// weight in their mix, kept only when the paired comparison over held-out
		// workloads shows the mix with it better than without beyond mixT standard errors.
		var rows []pair
		var mm, rrS, mr, vrS float64
		for _, p := range res[k] {
			if !p.hasRf {
				continue
			}
			rm := c.wTr*p.rt + (1-c.wTr)*p.rl
			mm += rm * rm
			rrS += p.rr * p.rr
			mr += rm * p.rr
			vrS += p.vr
			p.rt = rm // the mix's residual from here on
			rows = append(rows, p)
		}
		c.calRf, c.nRf = 1, len(rows)
		if len(rows) < 10 {
			continue
		}
		c.calRf = math.Max(rrS/vrS, 0.1)
		c.rhoRf = math.Max(0, math.Min(0.95, mr/math.Sqrt(mm*rrS)))
		wr := 0.5
		if d := mm + rrS - 2*mr; d > 0 {
			wr = math.Max(0, math.Min(1, (mm-mr)/d))
		}
		for _, p := range rows {
			c.maeRf += math.Abs(p.rr) / float64(len(rows))
			c.maeMixRf += math.Abs(p.rt) / float64(len(rows))
		}
		c.gainRf = rowGain(len(lr.rowWl), len(rows), func(i int) (int, float64) {
			p := rows[i]
			return p.row, math.Abs((1-wr)*p.rt+wr*p.rr) - math.Abs(p.rt)
		})
		if c.gainRf < -rfT {
			c.wRf = wr
		}
	}
	return out
}

// combine is P2's estimate from its members (see the top of this file). Where P1 had no
// related workload its figure is a population level that the job's own runs make obsolete:
// it is left out once the transfer or the completion has an estimate.
func (pt *p2Parts) combine() (y, variance float64) {
	var ys, sd [3]float64
	var kind [3]int // 0 posterior, 1 transfer, 2 completion
	k := 0
	add := func(y, v float64, m int) {
		if v > 0 && !math.IsInf(v, 1) {
			ys[k], sd[k], kind[k] = y, math.Sqrt(v), m
			k++
		}
	}
	hasTr, hasLr := !math.IsInf(pt.trVar, 1), !math.IsInf(pt.lrVar, 1)
	if !hasTr && !hasLr || pt.onSlot && !pt.unrelated {
		add(pt.post, pt.postVar, 0)
	}
	// The roofline joins the mix of the other two with its validated weight (0 unless the
	// hold-outs showed it helps).
	withRf := func(y, v float64) (float64, float64) {
		w := pt.wRf
		if w <= 0 || math.IsInf(pt.rfVar, 1) || !(pt.rfVar > 0) {
			return y, v
		}
		return (1-w)*y + w*pt.rf, (1-w)*(1-w)*v + w*w*pt.rfVar + 2*w*(1-w)*pt.rhoRf*math.Sqrt(v*pt.rfVar)
	}
	switch {
	case hasTr && hasLr:
		w := pt.wTr
		cv := w*w*pt.trVar + (1-w)*(1-w)*pt.lrVar + 2*w*(1-w)*pt.rho*math.Sqrt(pt.trVar*pt.lrVar)
		my, mv := withRf(w*pt.tr+(1-w)*pt.lr, cv)
		add(my, mv, 1)
	case hasTr:
		my, mv := withRf(pt.tr, pt.trVar)
		add(my, mv, 1)
	case hasLr:
		my, mv := withRf(pt.lr, pt.lrVar)
		add(my, mv, 2)
	}
	if k == 0 {
		return pt.post, pt.postVar
	}
	rho := func(a, b int) float64 {
		switch {
		case a == b:
			return 1
		case a == 0 || b == 0:
			return rhoPost
		}
		return pt.rho
	}
	for {
		// Generalised least squares: a = S^-1 1, weights a / sum(a), variance 1 / sum(a),
		// S the members' error covariance. At most 3x3: solved in place, without allocating.
		var s [3][3]float64
		for i := 0; i < k; i++ {
			for j := 0; j < k; j++ {
				s[i][j] = rho(kind[i], kind[j]) * sd[i] * sd[j]
			}
		}
		a, ok := solveSPD3(&s, k)
		if !ok {
			break
		}
		worst, sum := -1, 0.0
		for i := 0; i < k; i++ {
			sum += a[i]
			if a[i] < 0 && (worst < 0 || a[i] < a[worst]) {
				worst = i
			}
		}
		if worst < 0 && sum > 0 {
			for i := 0; i < k; i++ {
				y += a[i] / sum * ys[i]
			}
			return y, 1 / sum
		}
		if worst < 0 {
			break
		}
		// Drop the member with the most negative weight and solve again.
		copy(ys[worst:], ys[worst+1:])
		copy(sd[worst:], sd[worst+1:])
		copy(kind[worst:], kind[worst+1:])
		k--
	}
	// Degenerate covariance: the most certain member.
	best := 0
	for i := 1; i < k; i++ {
		if sd[i] < sd[best] {
			best = i
		}
	}
	return ys[best], sd[best] * sd[best]
}

// solveSPD3 solves s x = 1 for the leading k x k block (k <= 3) of a symmetric positive
// definite s by Cholesky; ok is false when s is not positive definite.
func solveSPD3(s *[3][3]float64, k int) (x [3]float64, ok bool) {
	var l [3][3]float64
	for i := 0; i < k; i++ {
		for j := 0; j <= i; j++ {
			v := s[i][j]
			for m := 0; m < j; m++ {
				v -= l[i][m] * l[j][m]
			}
			if i == j {
				if v <= 1e-18 {
					return x, false
				}
				l[i][i] = math.Sqrt(v)
			} else {
				l[i][j] = v / l[j][j]
			}
		}
	}
	var z [3]float64
	for i := 0; i < k; i++ {
		v := 1.0
		for m := 0; m < i; m++ {
			v -= l[i][m] * z[m]
		}
		z[i] = v / l[i][i]
	}
	for i := k - 1; i >= 0; i-- {
		v := z[i]
		for m := i + 1; m < k; m++ {
			v -= l[m][i] * x[m]
		}
		x[i] = v / l[i][i]
	}
	return x, true
}
