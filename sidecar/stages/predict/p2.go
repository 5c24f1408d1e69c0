package predict

import (
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/gonum/mat"
)

// P2 refines P1 online with a job's own runs. P1's error on a workload is not independent
// across GPU types and counts: a model P1 underestimates on a P100 it usually underestimates
// on a V100 too, by an amount that depends on the pair of types. P2 treats P1's
// log-throughput residuals over the slots (GPU type, GPU-count doubling) as a Gaussian with a
// covariance learnt from P1's out-of-fold residuals on the training workloads, and
// conditions on the job's measured runs (each run a noisy observation of its slot). The
// posterior mean corrects P1 on every slot, including types the job never ran on, and the
// posterior variance is the reported uncertainty.

// slotKey is one P2 dimension: a GPU type and the GPU count rounded to a power of two.
type slotKey struct {
	GPU    string
	Bucket int
}

func bucketOf(gpus int) int { return int(math.Round(math.Log2(float64(max(gpus, 1))))) }

// p2Model is the learnt residual covariance, structured so that a few dozen workloads can
// estimate it without the posterior chasing noise:
//
//	cov(r(g,b), r(g',b')) = T[g,g'] + sc2*[b = b'] + se2*[g = g' and b = b']
//
// T is a full GPU-type x GPU-type covariance (the learnt cross-type correlation: how much a
// job's P1 error on one type says about another), sc2 the part shared by equal GPU counts
// across types (scaling errors), se2 the slot's own error, a floor of which keeps the
// posterior from trusting P1's fine structure.
type p2Model struct {
	types []string
	tIdx  map[string]int
	// t is types x types, row-major.
	t        []float64
	sc2, se2 float64
	// tbar is T's mean diagonal and rhoOther its mean cross-type correlation, used for GPU
	// types the training data did not have.
	tbar, rhoOther float64
	// runNoise is the log-scale standard deviation of one measured run.
	runNoise float64
}

// Defaults for P2 when the training data cannot tell.
const (
	defaultRunNoise = 0.05
	defaultRhoOther = 0.5
	// coldVar is the extra log-variance of a GPU type with no catalog entries, whose P1
	// estimate is a datasheet-ratio prior: a 25 % standard deviation.
	coldVar = 0.25 * 0.25
	// nuggetFrac is the smallest share of a slot's variance that is its own.
	nuggetFrac = 0.1
	// seedRuns is how many runs a published measurement counts as in P2.
	seedRuns = 25
)

// residualSet holds the out-of-fold P1 residuals of one workload per slot.
type residualSet map[slotKey]float64

// learnP2 estimates the structured covariance by moments: products of residual pairs of one
// workload, grouped by whether the two slots share the GPU type and/or the count bucket.
func learnP2(sets []residualSet, runNoise float64) (*p2Model, error) {
	typeSet := map[string]bool{}
	for _, s := range sets {
		for k := range s {
			typeSet[k.GPU] = true
		}
	}
	if len(typeSet) == 0 {
		return nil, fmt.Errorf("learn P2: no residuals (no workload was measured on any GPU type)")
	}
	p := &p2Model{runNoise: runNoise}
	for g := range typeSet {
		p.types = append(p.types, g)
	}
	sort.Strings(p.types)
	p.index()
	nt := len(p.types)
	// Moment sums: diff[g*nt+h] over pairs with different buckets, same[...] over pairs with
	// equal buckets and different types, diag[g] over each slot with itself.
	diffS, diffN := make([]float64, nt*nt), make([]float64, nt*nt)
	sameS, sameN := make([]float64, nt*nt), make([]float64, nt*nt)
	diagS, diagN := make([]float64, nt), make([]float64, nt)
	keys := make([]slotKey, 0, 16)
	for _, s := range sets {
		keys = keys[:0]
		for k := range s {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			return keys[i].GPU < keys[j].GPU || keys[i].GPU == keys[j].GPU && keys[i].Bucket < keys[j].Bucket
		})
		for _, a := range keys {
			ga := p.tIdx[a.GPU]
			for _, b := range keys {
				gb := p.tIdx[b.GPU]
				v := s[a] * s[b]
				switch {
				case a == b:
					diagS[ga] += v
					diagN[ga]++
				case a.Bucket != b.Bucket:
					diffS[ga*nt+gb] += v
					diffN[ga*nt+gb]++
				default:
					sameS[ga*nt+gb] += v
					sameN[ga*nt+gb]++
				}
			}
		}
	}
	var dsum, dn float64
	for g := 0; g < nt; g++ {
		dsum += diagS[g]
		dn += diagN[g]
	}
	vbar := math.Max(dsum/dn, 1e-4)
	diagV := make([]float64, nt)
	for g := range diagV {
		// Shrink each type's variance towards the pooled one by 3 pseudo-slots.
		diagV[g] = (diagS[g] + 3*vbar) / (diagN[g] + 3)
	}
	// sc2: what equal counts add across types, beyond different counts.
	var c2, c2n float64
	for i := 0; i < nt*nt; i++ {
		if diffN[i] >= 3 && sameN[i] >= 3 {
			c2 += sameS[i]/sameN[i] - diffS[i]/diffN[i]
			c2n++
		}
	}
	if c2n > 0 {
		p.sc2 = math.Max(0, c2/c2n)
	}
	raw := mat.NewSymDense(nt, nil)
	var e2, e2n float64
	for g := 0; g < nt; g++ {
		for h := g; h < nt; h++ {
			i, j := g*nt+h, h*nt+g
			var v float64
			switch {
			case diffN[i]+diffN[j] >= 3:
				v = (diffS[i] + diffS[j]) / (diffN[i] + diffN[j])
			case g != h && sameN[i]+sameN[j] >= 3:
				v = (sameS[i]+sameS[j])/(sameN[i]+sameN[j]) - p.sc2
			case g == h:
				v = (1 - nuggetFrac) * diagV[g]
			default:
				v = defaultRhoOther * math.Sqrt(diagV[g]*diagV[h])
			}
			if g == h {
				v = math.Min(v, (1-nuggetFrac)*diagV[g]-p.sc2)
				e2 += diagV[g] - v - p.sc2
				e2n++
			}
			raw.SetSym(g, h, v)
		}
	}
	p.se2 = math.Max(e2/e2n, nuggetFrac*vbar)
	// T must be positive semi-definite: clip its eigenvalues at zero.
	var eig mat.EigenSym
	if !eig.Factorize(raw, true) {
		return nil, fmt.Errorf("learn P2: eigen-decomposition of the %dx%d type covariance failed", nt, nt)
	}
	vals := eig.Values(nil)
	var vecs mat.Dense
	eig.VectorsTo(&vecs)
	p.t = make([]float64, nt*nt)
	for i := 0; i < nt; i++ {
		for j := 0; j < nt; j++ {
			var s float64
			for k := 0; k < nt; k++ {
				s += vecs.At(i, k) * math.Max(vals[k], 0) * vecs.At(j, k)
			}
			p.t[i*nt+j] = s
		}
	}
	p.summarise()
	return p, nil
}

// summarise sets the defaults for unknown GPU types from T.
func (p *p2Model) summarise() {
	nt := len(p.types)
	var d, r, rn float64
	for g := 0; g < nt; g++ {
		d += p.t[g*nt+g]
		for h := g + 1; h < nt; h++ {
			if den := math.Sqrt(p.t[g*nt+g] * p.t[h*nt+h]); den > 0 {
				r += p.t[g*nt+h] / den
				rn++
			}
		}
	}
	p.tbar = d / float64(nt)
	p.rhoOther = defaultRhoOther
	if rn > 0 {
		p.rhoOther = math.Max(0, r/rn)
	}
}

func (p *p2Model) index() {
	p.tIdx = map[string]int{}
	for i, g := range p.types {
		p.tIdx[g] = i
	}
}

// pslot is a slot as P2 sees it. f scales P1's error on it: P1 is much surer where the
// nearest neighbour is the same model at another batch size than where it is an unrelated
// model (see Model.P1Var); cold marks a GPU type without catalog entries, whose P1 estimate
// is the datasheet prior.
type pslot struct {
	gpu    string
	bucket int
	cold   bool
	f      float64
	// unrelated marks a P1 estimate without any workload of the same family (or cold).
	unrelated bool
}

// tv is T for two GPU types, with defaults for types P2 has not learnt.
func (p *p2Model) tv(a, b string) float64 {
	nt := len(p.types)
	i, okA := p.tIdx[a]
	j, okB := p.tIdx[b]
	switch {
	case okA && okB:
		return p.t[i*nt+j]
	case okA:
		return p.rhoOther * math.Sqrt(p.t[i*nt+i]*p.tbar)
	case okB:
		return p.rhoOther * math.Sqrt(p.t[j*nt+j]*p.tbar)
	case a == b:
		return p.tbar
	}
	return p.rhoOther * p.tbar
}

// k is the prior covariance of two slots.
func (p *p2Model) k(a, b pslot) float64 {
	c := p.tv(a.gpu, b.gpu)
	if a.bucket == b.bucket {
		c += p.sc2
		if a.gpu == b.gpu {
			c += p.se2
		}
	}
	c *= a.f * b.f
	if a.bucket == b.bucket && a.gpu == b.gpu && (a.cold || b.cold) {
		c += coldVar
	}
	return c
}

// p2Obs is a workload's evidence on one resolved slot: the mean residual and how many
// runs it averages.
type p2Obs struct {
	s    pslot
	r    float64
	runs float64
}

// p2State is a workload's posterior, ready for allocation-free queries.
type p2State struct {
	obs []pslot
	// alpha = (K_oo + D)^-1 r and l the lower Cholesky factor of K_oo + D, row-major.
	alpha []float64
	l     []float64
}

// posterior conditions on the observations; nil when there are none.
func (p *p2Model) posterior(obs []p2Obs, runNoise float64) (*p2State, error) {
	n := len(obs)
	if n == 0 {
		return nil, nil
	}
	a := mat.NewSymDense(n, nil)
	r := mat.NewVecDense(n, nil)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			a.SetSym(i, j, p.k(obs[i].s, obs[j].s))
		}
		a.SetSym(i, i, a.At(i, i)+runNoise*runNoise/obs[i].runs+1e-9)
		r.SetVec(i, obs[i].r)
	}
	var ch mat.Cholesky
	if !ch.Factorize(a) {
		return nil, fmt.Errorf("P2 posterior: covariance of %d observed slots is not positive definite", n)
	}
	var alpha mat.VecDense
	if err := ch.SolveVecTo(&alpha, r); err != nil {
		return nil, fmt.Errorf("P2 posterior: %w", err)
	}
	var lt mat.TriDense
	ch.LTo(&lt)
	st := &p2State{obs: make([]pslot, n), alpha: make([]float64, n), l: make([]float64, n*n)}
	for i := 0; i < n; i++ {
		st.obs[i] = obs[i].s
		st.alpha[i] = alpha.AtVec(i)
		for j := 0; j <= i; j++ {
			st.l[i*n+j] = lt.At(i, j)
		}
	}
	return st, nil
}

// query returns the posterior mean and variance of the residual on slot u. buf must hold at
// least len(st.obs) values; nothing is allocated.
func (p *p2Model) query(st *p2State, u pslot, buf []float64) (mean, variance float64) {
	prior := p.k(u, u)
	if st == nil {
		return 0, prior
	}
	n := len(st.obs)
	w := buf[:n]
	for i := 0; i < n; i++ {
		w[i] = p.k(u, st.obs[i])
		mean += w[i] * st.alpha[i]
	}
	// Forward substitution: w <- L^-1 k_uo; variance = k_uu - |w|^2.
	variance = prior
	for i := 0; i < n; i++ {
		s := w[i]
		for j := 0; j < i; j++ {
			s -= st.l[i*n+j] * w[j]
		}
		w[i] = s / st.l[i*n+i]
		variance -= w[i] * w[i]
	}
	return mean, math.Max(variance, 1e-6)
}
