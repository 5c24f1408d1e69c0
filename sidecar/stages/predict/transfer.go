package predict

import (
	"math"

	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/throughput"
)

// The transfer half of P2: a job's own measured runs on one slot (GPU type, GPU count)
// carried to another slot through the log-ratio between the two slots that similar
// workloads measured on both show (kernel-weighted by the similarity metric). Where no
// workload links the two slots, the ratio is the datasheet speed ratio to the power Beta
// and the table's GPU-count scaling. Each carried run comes with a variance: the spread of
// the linking workloads' ratios (shrunk towards the datasheet fit's residual variance when
// few link them) plus the runs' noise. P2 combines this with P1's residual posterior by
// precision; whichever is more certain for a slot dominates it.

// maxBucket is the largest GPU-count bucket (2^5 = 32 GPUs) in the transfer grid.
const maxBucket = 5

const nBuckets = maxBucket + 1

// grid is a dense per-workload table of trusted per-GPU log-throughputs at power-of-two
// counts, NaN where unknown; it makes the transfer's inner loop plain array reads.
type grid struct {
	types []string
	tIdx  map[string]int
	// vals[wl*stride + type*nBuckets + bucket].
	vals   []float64
	stride int
	// lnDS[from*len(types)+to] is the log datasheet speed ratio, NaN when unknown.
	lnDS []float64
	// lb is each workload's log2 batch size; sib lists the other workloads of the same
	// model name with a known batch size (nil when the workload's batch is unknown).
	lb  []float64
	sib [][]int
}

func newGrid(ix *index, specs *gpuspec.Table) *grid {
	g := &grid{types: specs.Types(), tIdx: map[string]int{}}
	for i, t := range g.types {
		g.tIdx[t] = i
	}
	g.stride = len(g.types) * nBuckets
	nt := len(g.types)
	g.lnDS = make([]float64, nt*nt)
	for i, a := range g.types {
		for j, b := range g.types {
			g.lnDS[i*nt+j] = math.NaN()
			if r := datasheetRatio(specs, a, b); r > 0 {
				g.lnDS[i*nt+j] = math.Log(r)
			}
		}
	}
	g.lb = make([]float64, len(ix.wls))
	g.sib = make([][]int, len(ix.wls))
	byName := map[string][]int{}
	for i := range ix.wls {
		w := &ix.wls[i]
		g.lb[i] = w.lb
		if w.f.BatchSize > 0 {
			byName[w.name] = append(byName[w.name], i)
		}
	}
	for i := range ix.wls {
		if ix.wls[i].f.BatchSize <= 0 {
			continue
		}
		for _, j := range byName[ix.wls[i].name] {
			if j != i {
				g.sib[i] = append(g.sib[i], j)
			}
		}
	}
	g.vals = make([]float64, len(ix.wls)*g.stride)
	for i := range g.vals {
		g.vals[i] = math.NaN()
	}
	for _, wk := range ix.wgKeys {
		ti, ok := g.tIdx[wk.gpu]
		if !ok {
			continue
		}
		for _, c := range ix.trusted[wk] {
			if b, ok := exactBucket(c.n); ok {
				g.vals[wk.wl*g.stride+ti*nBuckets+b] = c.y
			}
		}
	}
	return g
}

// exactBucket returns log2(n) for a power of two up to 2^maxBucket.
func exactBucket(n int) (int, bool) {
	if n < 1 || n&(n-1) != 0 {
		return 0, false
	}
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return b, b <= maxBucket
}

// ownSlot is a workload's own evidence on one grid slot.
type ownSlot struct {
	slot int
	y    float64
	runs float64
}

// trEst is a transferred estimate for one grid slot; v is +Inf where there is none.
type trEst struct {
	y, v float64
}

// transferConst are the fallbacks when no workload links two slots.
type transferConst struct {
	beta, betaVar float64
	// countVar is the variance added per doubling of GPU count carried by the table's
	// scaling exponent.
	countVar float64
}

// transfer computes the transferred estimate of workload q (id self, weights w over the
// workloads, own evidence own) for every slot of the grid.
func (g *grid) transfer(self int, w []float64, own []ownSlot, runNoise float64, tc transferConst) []trEst {
	out := make([]trEst, g.stride)
	ownAt := make([]int, g.stride)
	for i := range ownAt {
		ownAt[i] = -1
	}
	for i, o := range own {
		ownAt[o.slot] = i
	}
	for t := 0; t < g.stride; t++ {
		tt, tb := t/nBuckets, t%nBuckets
		var prec, py, minV float64
		minV = math.Inf(1)
		for _, o := range own {
			if o.slot == t {
				continue // the slot itself is P1+GP's (and the catalog's) business
			}
			ot, ob := o.slot/nBuckets, o.slot%nBuckets
			sw, sw2, sd, sdd := g.linkSums(self, w, t, o.slot)
			countShift := (throughput.ScalingExponent - 1) * math.Ln2 * float64(tb-ob)
			prior := math.NaN()
			priorVar := tc.countVar * math.Abs(float64(tb-ob))
			if tt == ot {
				prior = countShift
			} else if l := g.lnDS[ot*len(g.types)+tt]; !math.IsNaN(l) {
				prior = tc.beta*l + countShift
				priorVar += tc.betaVar
			}
			var r, v float64
			okK := true
			switch {
			case sw > 0:
				neff := sw * sw / sw2
				r = sd / sw
				spread := math.Max(sdd/sw-r*r, 0)
				// Shrink the spread towards the prior variance by two pseudo-workloads and
				// add the error of the mean itself.
				pv := priorVar
				if math.IsNaN(prior) || pv == 0 {
					pv = tc.betaVar
				}
				v = (neff*spread+2*pv)/(neff+2)*(1+1/neff) + 0.002
			case !math.IsNaN(prior):
				r, v = prior, priorVar+0.002
			default:
				okK = false
			}
			nv := runNoise * runNoise / o.runs
			if ri, vi, ok := g.interpolate(self, [4]int{t, o.slot, -1, -1}); ok {
				vi += nv
				prec += 1 / vi
				py += (o.y + ri) / vi
				minV = math.Min(minV, vi)
			}
			if !okK {
				continue
			}
			v += nv
			y := o.y + r
			prec += 1 / v
			py += y / v
			minV = math.Min(minV, v)
			minV = math.Min(minV, v)
		}
		// Double differences: with the job's own runs on (target type, count m), (type h,
		// target count) and (h, m), the target is y(t,m) + y(h,n) - y(h,m) plus the
		// interaction the same model shows at neighbouring batch sizes. It cancels both the
		// job's type effect and its count effect, which single ratios carry as error.
		for _, o1 := range own {
			if o1.slot/nBuckets != tt || o1.slot == t {
				continue
			}
			ob := o1.slot % nBuckets
			for _, o2 := range own {
				ht := o2.slot / nBuckets
				if o2.slot%nBuckets != tb || ht == tt {
					continue
				}
				i3 := ownAt[ht*nBuckets+ob]
				if i3 < 0 {
					continue
				}
				o3 := own[i3]
				r, v, ok := g.interpolate(self, [4]int{t, o1.slot, o2.slot, o3.slot})
				if !ok {
					continue
				}
				v += runNoise * runNoise * (1/o1.runs + 1/o2.runs + 1/o3.runs)
				y := o1.y + o2.y - o3.y + r
				prec += 1 / v
				py += y / v
				minV = math.Min(minV, v)
			}
		}
		if prec == 0 {
			out[t] = trEst{v: math.Inf(1)}
			continue
		}
		// The carried runs share the job's own quirks, so they are not independent: do not
		// let many of them claim more than twice the certainty of the best one.
		out[t] = trEst{y: py / prec, v: math.Max(1/prec, minV/2)}
	}
	return out
}

// interpVar is the variance floor of a batch-size interpolated log-ratio.
const interpVar = 0.003

// linkSums are the kernel-weighted sums over the other workloads that ran on both slots t
// and o of their log throughput differences (weight, squared weight, weighted difference,
// weighted squared difference): the transfer's and the roofline's cross-slot ratio.
func (g *grid) linkSums(self int, w []float64, t, o int) (sw, sw2, sd, sdd float64) {
	for p := range w {
		if p == self || w[p] == 0 {
			continue
		}
		a, b := g.vals[p*g.stride+t], g.vals[p*g.stride+o]
		if math.IsNaN(a) || math.IsNaN(b) {
			continue
		}
		d := a - b
		sw += w[p]
		sw2 += w[p] * w[p]
		sd += w[p] * d
		sdd += w[p] * d * d
	}
	return sw, sw2, sd, sdd
}

// interpolate is the same-model estimate for workload self of the log-ratio between grid
// slots sl[0] and sl[1], or with sl[2], sl[3] >= 0 of the double difference
// y[0] - y[1] - y[2] + y[3]: cross-type and cross-count ratios of one model vary a lot with batch size
// (Gavel's ResNet-18 V100/P100 ratio is 0.90 at batch 16 and 1.54 at batch 128) but
// smoothly, so the ratio is interpolated linearly in log2 batch between the model's nearest
// smaller and larger batch sizes measured on both slots, or taken from the nearest one when
// the batch lies outside them. The variance is half the squared half-gap of the two
// bracketing ratios (how non-linear the curve is there), or the spread of the model's
// ratios when extrapolating. It needs two such sibling workloads; otherwise ok is false and
// the caller falls back to the kernel average over all workloads.
func (g *grid) interpolate(self int, sl [4]int) (r, v float64, ok bool) {
	sib := g.sib[self]
	if len(sib) < 2 {
		return 0, 0, false
	}
	lb0 := g.lb[self]
	lo, hi := math.Inf(-1), math.Inf(1)
	var loD, hiD, sum, sum2 float64
	n := 0
	for _, p := range sib {
		row := g.vals[p*g.stride : (p+1)*g.stride]
		d := row[sl[0]] - row[sl[1]]
		if sl[2] >= 0 {
			d += row[sl[3]] - row[sl[2]]
		}
		if math.IsNaN(d) {
			continue
		}
		x := g.lb[p] - lb0
		n++
		sum += d
		sum2 += d * d
		switch {
		case x < 0 && x > lo:
			lo, loD = x, d
		case x > 0 && x < hi:
			hi, hiD = x, d
		}
	}
	if n < 2 {
		return 0, 0, false
	}
	switch {
	case !math.IsInf(lo, 0) && !math.IsInf(hi, 0):
		half := (hiD - loD) / 2
		return loD + (hiD-loD)*(-lo)/(hi-lo), 0.5*half*half + interpVar, true
	case !math.IsInf(lo, 0):
		r = loD
	default:
		r = hiD
	}
	m := sum / float64(n)
	return r, math.Max(sum2/float64(n)-m*m, 0) + interpVar, true
}

// kernelWeights fills w with every workload's similarity weight to workload id.
func kernelWeights(wls []workload, id int, w []float64) {
	for j := range wls {
		w[j] = math.Exp(-distance(&wls[id], &wls[j]) / kernelTau)
	}
}

// carry is the transfer of workload self's own runs to every grid slot, combined with the
// conditional Gaussian when withCG (only workloads with runs of their own: for seeded ones
// it adds nothing the catalog does not know, and it is the costly part of a rebuild).
func (g *grid) carry(self int, w []float64, own []ownSlot, runNoise float64, tc transferConst, withCG bool) []trEst {
	tr := g.transfer(self, w, own, runNoise, tc)
	if withCG {
		for t := range tr {
			tr[t] = g.carryCG(self, w, own, runNoise, t, tr[t])
		}
	}
	return tr
}

// carryCG combines the pairwise transfer e of slot t with the conditional Gaussian by
// precision; as there, the two share the job's runs, so the result claims at most twice
// the better one's certainty.
func (g *grid) carryCG(self int, w []float64, own []ownSlot, runNoise float64, t int, e trEst) trEst {
	y, v, ok := g.conditional(self, w, own, runNoise, t)
	switch {
	case !ok:
		return e
	case math.IsInf(e.v, 1):
		return trEst{y: y, v: v}
	}
	pr := 1/v + 1/e.v
	return trEst{y: (y/v + e.y/e.v) / pr, v: math.Max(1/pr, math.Min(e.v, v)/2)}
}
