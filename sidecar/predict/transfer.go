package predict

import (
	"math"

	"github.com/hetgpu/hetgpu/sidecar/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/throughput"
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
	nw := len(w)
	for t := 0; t < g.stride; t++ {
		tt, tb := t/nBuckets, t%nBuckets
		var prec, py, minV float64
		minV = math.Inf(1)
		for _, o := range own {
			if o.slot == t {
				continue // the slot itself is P1+GP's (and the catalog's) business
			}
			ot, ob := o.slot/nBuckets, o.slot%nBuckets
			var sw, sw2, sd, sdd float64
			for p := 0; p < nw; p++ {
				if p == self || w[p] == 0 {
					continue
				}
				a, b := g.vals[p*g.stride+t], g.vals[p*g.stride+o.slot]
				if math.IsNaN(a) || math.IsNaN(b) {
					continue
				}
				d := a - b
				sw += w[p]
				sw2 += w[p] * w[p]
				sd += w[p] * d
				sdd += w[p] * d * d
			}
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
				continue
			}
			v += runNoise * runNoise / o.runs
			y := o.y + r
			prec += 1 / v
			py += y / v
			minV = math.Min(minV, v)
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
