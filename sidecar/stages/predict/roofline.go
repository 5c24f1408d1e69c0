package predict

import "math"

// The roofline member of P2: the GPU datasheets as a source of their own. A job's
// throughput ratio between two GPU types departs from its similar workloads' ratio when it
// is more (or less) bound by what the datasheets rank the types by (compute and memory
// bandwidth: grid.lnDS, the log datasheet speed ratio). The roofline estimator assumes that
// departure is one number per job, a slope on the datasheet axis, the same for every pair
// of types and every GPU count:
//
//	y(job, h, n) - y(job, t, n) = R(t->h at n) + delta * lnDS(t->h)
//
// R is the kernel-weighted mean log ratio of the workloads measured on both slots (the
// transfer's single-ratio carry), delta is fitted by ridge regression on the job's own
// pairs of runs at equal counts on different types, and each of the job's runs on another
// type at the target count is carried with it. It borrows nothing from the job's count
// scaling (that is the transfer's), so it has an estimate only where the job ran at the
// target count on another type.
//
// Its stated variance (spread of the linking ratios, the runs' noise, the slope's
// uncertainty) is calibrated on the catalog's workload-grouped hold-outs like the others,
// and it joins the combination only where those hold-outs show it improves the
// combination beyond doubt (p2combine.go: validateCombination).

// rfKappa is the ridge on the slope delta, in units of squared datasheet log ratios: a
// job's pair of runs at a log ratio of 1 weighs as much as the prior delta = 0.
const rfKappa = 0.5

// datasheetLogRatio is lnDS between the types of slots a and b when they have the same GPU
// count on different types (the pairs the roofline member compares), and whether there is one.
func (g *grid) datasheetLogRatio(a, b int) (float64, bool) {
	at, ab := a/nBuckets, a%nBuckets
	bt, bb := b/nBuckets, b%nBuckets
	if ab != bb || at == bt {
		return 0, false
	}
	x := g.lnDS[at*len(g.types)+bt]
	return x, !math.IsNaN(x)
}

// rfSlope fits the job's datasheet slope from its own pairs at equal counts on different
// types: the slope, its variance, and whether any pair informed it.
func (g *grid) rfSlope(self int, w []float64, own []ownSlot, runNoise float64) (delta, variance float64, ok bool) {
	var sxe, sxx, see, ne float64
	for i, a := range own {
		for _, b := range own[i+1:] {
			x, okX := g.datasheetLogRatio(a.slot, b.slot)
			if !okX {
				continue
			}
			r, _, okR := g.kernelRatio(self, w, b.slot, a.slot)
			if !okR {
				continue
			}
			e := b.y - a.y - r
			sxe += x * e
			sxx += x * x
			see += e * e
			ne++
		}
	}
	if ne == 0 {
		return 0, 0, false
	}
	delta = sxe / (sxx + rfKappa)
	// The residual variance of a pair around the slope (at least the runs' noise of two
	// runs), over the slope's effective information.
	s2 := math.Max((see-delta*sxe)/math.Max(ne, 1), 2*runNoise*runNoise)
	return delta, s2 / (sxx + rfKappa), true
}

// kernelRatio is the kernel-weighted mean log ratio between grid slots t and o over the
// workloads (other than self) measured on both, its variance (spread shrunk like the
// transfer's, plus the mean's own error), and whether any workload links them.
func (g *grid) kernelRatio(self int, w []float64, t, o int) (r, v float64, ok bool) {
	sw, sw2, sd, sdd := g.linkSums(self, w, t, o)
	if sw == 0 {
		return 0, 0, false
	}
	neff := sw * sw / sw2
	r = sd / sw
	spread := math.Max(sdd/sw-r*r, 0)
	return r, (neff*spread+2*rfPriorVar)/(neff+2)*(1+1/neff) + 0.002, true
}

// rfPriorVar is the ratio variance the spread of few linking workloads is shrunk towards
// (a 20 % standard deviation).
const rfPriorVar = 0.04

// roofline computes the roofline estimate of workload self (kernel weights w, own
// evidence own) for every grid slot; v is +Inf where it has none.
func (g *grid) roofline(self int, w []float64, own []ownSlot, runNoise float64) []trEst {
	out := make([]trEst, g.stride)
	g.rooflineTo(out, self, w, own, runNoise)
	return out
}

// rooflineTo is roofline into out (len g.stride).
func (g *grid) rooflineTo(out []trEst, self int, w []float64, own []ownSlot, runNoise float64) {
	delta, dVar, okD := g.rfSlope(self, w, own, runNoise)
	for t := range out {
		out[t] = trEst{v: math.Inf(1)}
		if !okD {
			continue
		}
		var prec, py, minV float64
		minV = math.Inf(1)
		for _, o := range own {
			x, okX := g.datasheetLogRatio(o.slot, t)
			if !okX {
				continue
			}
			r, v, ok := g.kernelRatio(self, w, t, o.slot)
			if !ok {
				continue
			}
			v += runNoise*runNoise/o.runs + x*x*dVar
			prec += 1 / v
			py += (o.y + r + delta*x) / v
			minV = math.Min(minV, v)
		}
		if prec == 0 {
			continue
		}
		// The carried runs share the slope: at most twice the certainty of the best one.
		out[t] = trEst{y: py / prec, v: math.Max(1/prec, minV/2)}
	}
}
