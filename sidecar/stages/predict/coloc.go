package predict

import (
	"math"

	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/throughput"
)

// Co-location: two single-GPU jobs sharing one GPU each run at a fraction of their isolated
// throughput. Gavel measured every pair of its job types on K80, P100 and V100; a measured
// pair is answered from the table, any other pair from the similarity-weighted pairs closest
// to it (same metric as P1's neighbours, summed over both jobs), on the same GPU type when
// that type has pairs, else on all types.

// colocPair is one measured pair on one GPU type: each job's colocated/isolated ratio.
type colocPair struct {
	gpu    string
	a, b   workload
	ra, rb float64
}

type colocModel struct {
	pairs []colocPair
	byGPU map[string][]int
}

// Co-location sources.
const (
	SrcColocMeasured = "measured"
	SrcColocKNN      = "knn"
	SrcColocPrior    = "prior"
	// SrcColocObserved: at least one side comes from runs hetgpu saw the pair make.
	SrcColocObserved = "observed"
)

const (
	colocK   = 8
	colocTau = 0.5
	// colocPrior is the ratio assumed when there is no pair data at all: each job at half
	// speed, i.e. time-slicing without any overlap gain.
	colocPrior = 0.5
)

func newColocModel(t *throughput.Table) *colocModel {
	m := &colocModel{byGPU: map[string][]int{}}
	if t == nil {
		return m
	}
	jobs := t.JobTypes()
	wls := make([]workload, len(jobs))
	okJ := make([]bool, len(jobs))
	for i, j := range jobs {
		f, err := JobTypeFeatures(j)
		if err == nil {
			wls[i], okJ[i] = newWorkload(f), true
		}
	}
	for _, g := range t.GPUTypes() {
		for i, ja := range jobs {
			ia, ok := t.Measured(ja, g, 1)
			if !ok || ia <= 0 || !okJ[i] {
				continue
			}
			for j := i; j < len(jobs); j++ {
				jb := jobs[j]
				ib, ok := t.Measured(jb, g, 1)
				if !ok || ib <= 0 || !okJ[j] {
					continue
				}
				ta, tb, ok := t.Colocated(g, ja, 1, jb, 1)
				if !ok || ta <= 0 || tb <= 0 {
					continue
				}
				m.byGPU[g] = append(m.byGPU[g], len(m.pairs))
				m.pairs = append(m.pairs, colocPair{gpu: g, a: wls[i], b: wls[j], ra: ta / ia, rb: tb / ib})
			}
		}
	}
	return m
}

// predict returns each job's colocated/isolated throughput ratio. skip, when not nil,
// hides pairs (for leave-one-out evaluation).
func (m *colocModel) predict(a, b *workload, gpu string, skip func(int) bool) (ra, rb float64, src string) {
	cands := m.byGPU[gpu]
	if len(cands) == 0 {
		cands = nil
	}
	var best [colocK]struct {
		d      float64
		la, lb float64
	}
	cnt := 0
	consider := func(i int) {
		if skip != nil && skip(i) {
			return
		}
		p := &m.pairs[i]
		d, la, lb := distance(a, &p.a)+distance(b, &p.b), math.Log(p.ra), math.Log(p.rb)
		if d2 := distance(a, &p.b) + distance(b, &p.a); d2 < d {
			d, la, lb = d2, math.Log(p.rb), math.Log(p.ra)
		}
		if d == 0 && p.gpu == gpu {
			// Exact measurement: keep it alone.
			best[0].d, best[0].la, best[0].lb = -1, la, lb
			cnt = -1
			return
		}
		if cnt < 0 {
			return
		}
		pos := cnt
		if cnt < colocK {
			cnt++
		} else if d >= best[colocK-1].d {
			return
		} else {
			pos = colocK - 1
		}
		for pos > 0 && best[pos-1].d > d {
			best[pos] = best[pos-1]
			pos--
		}
		best[pos].d, best[pos].la, best[pos].lb = d, la, lb
	}
	if cands != nil {
		for _, i := range cands {
			consider(i)
		}
	} else {
		for i := range m.pairs {
			consider(i)
		}
	}
	if cnt < 0 {
		return math.Exp(best[0].la), math.Exp(best[0].lb), SrcColocMeasured
	}
	if cnt == 0 {
		return colocPrior, colocPrior, SrcColocPrior
	}
	var sw, sa, sb float64
	for i := 0; i < cnt; i++ {
		w := math.Exp(-(best[i].d - best[0].d) / colocTau)
		sw += w
		sa += w * best[i].la
		sb += w * best[i].lb
	}
	return math.Exp(sa / sw), math.Exp(sb / sw), SrcColocKNN
}

// Colocated predicts the throughput of two single-GPU workloads sharing one GPU of a type,
// each as a fraction of its isolated throughput (1 = no slowdown), and the source:
// "measured", "knn" or "prior".
func (p *Predictor) Colocated(a, b Features, gpuType string) (ratioA, ratioB float64, source string) {
	g := gpuspec.Canonical(gpuType)
	wa, wb := newWorkload(a), newWorkload(b)
	ra, rb, src := p.coloc.predict(&wa, &wb, g, nil)
	return p.refinePair(&wa, &wb, g, ra, rb, src)
}
