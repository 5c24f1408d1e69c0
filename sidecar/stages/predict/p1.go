package predict

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/hetgpu/hetgpu/internal/nn"
	"github.com/hetgpu/hetgpu/model/throughput"
)

// p1Net is a trained P1 network with the normalisation of its inputs and target.
type p1Net struct {
	net *net
	// Means and standard deviations of the raw query and token features; the token's last
	// feature (the presence flag) is left as is.
	qMean, qStd [dq]float64
	tMean, tStd [dt]float64
	// yStd scales the target (log-throughput minus the neighbour base).
	yStd float64
}

// neighbour is one selected catalog entry.
type neighbour struct {
	wl     int
	y      float64
	dcount float64
	dist   float64
}

// rawInputs are the unnormalised inputs of one query.
type rawInputs struct {
	xq      [dq]float64
	tok     [maxK][dt]float64
	present [maxK]bool
	base    float64
	// nearest is the distance of the most similar neighbour.
	nearest float64
}

// selectNeighbours picks the k workloads with trusted data on gpu closest to q (excluding
// self), adjusting each to the query's GPU count with the table's scaling exponent. It
// fills nb (most similar last) and returns how many it found. It does not allocate.
func selectNeighbours(ix *index, q *workload, self int, gpu string, gpus int, k int, nb *[maxK]neighbour) int {
	cands := ix.onGPU[gpu]
	log2n := math.Log2(float64(gpus))
	cnt := 0
	// best[0..cnt) sorted by ascending distance; ties keep the lower id (ids ascend).
	var best [maxK]neighbour
	for _, cand := range cands {
		id := cand.wl
		if id == self {
			continue
		}
		c, ok := nearestCount(cand.cs, log2n)
		if !ok {
			continue
		}
		dc := log2n - c.log2n
		d := distance(q, &ix.wls[id]) + countPenalty*math.Abs(dc)
		if cnt == k && d >= best[k-1].dist {
			continue
		}
		y := c.y + (throughput.ScalingExponent-1)*math.Ln2*dc
		pos := cnt
		if cnt < k {
			cnt++
		} else {
			pos = k - 1
		}
		for pos > 0 && best[pos-1].dist > d {
			best[pos] = best[pos-1]
			pos--
		}
		best[pos] = neighbour{wl: id, y: y, dcount: dc, dist: d}
	}
	// Most similar last: the RNN reads it freshest and FFN positions stay fixed.
	for i := 0; i < cnt; i++ {
		nb[k-1-i] = best[i]
	}
	return cnt
}

// buildInputs fills the raw inputs for workload q on a GPU type; ok is false when the type
// has no trusted catalog entries of other workloads.
func buildInputs(ix *index, q *workload, self int, gpu string, gpus int, gf gpuFeatures, k int, in *rawInputs) bool {
	var nb [maxK]neighbour
	cnt := selectNeighbours(ix, q, self, gpu, gpus, k, &nb)
	if cnt == 0 {
		return false
	}
	in.base = localBase(ix, q, &nb, k, cnt)
	in.nearest = nb[k-1].dist
	queryFeatures(in.xq[:], q, gpus, gf)
	for i := 0; i < k; i++ {
		if i < k-cnt {
			in.present[i] = false
			in.tok[i] = [dt]float64{}
			continue
		}
		in.present[i] = true
		tokenFeatures(in.tok[i][:], q, &ix.wls[nb[i].wl], nb[i].y, in.base, nb[i].dcount, nb[i].dist)
	}
	return true
}

// localBase is the starting point P1's networks correct: a ridge-regularised local linear
// fit of the neighbours' log-throughput against log2 batch size, using only the neighbours
// of the closest identity class present (same model name, else same family), with the
// slope pulled towards the catalog's typical batch-size slope. Without any related
// neighbour it is the kernel-weighted mean of all of them.
func localBase(ix *index, q *workload, nb *[maxK]neighbour, k, cnt int) float64 {
	class := func(p *workload) int {
		switch {
		case p.name == q.name:
			return 0
		case q.family != "" && p.family == q.family:
			return 1
		}
		return 2
	}
	best := 2
	for i := k - cnt; i < k; i++ {
		best = min(best, class(&ix.wls[nb[i].wl]))
	}
	if best == 2 {
		var sw, sy float64
		for i := k - cnt; i < k; i++ {
			w := math.Exp(-nb[i].dist / kernelTau)
			sw += w
			sy += w * nb[i].y
		}
		return sy / sw
	}
	// Weighted least squares of y = a + b*dx with a ridge (b - b0)^2 * lambda.
	const lambda = 1.0
	xq := log2b(q.f.BatchSize)
	var sw, sx, sy, sxx, sxy float64
	for i := k - cnt; i < k; i++ {
		p := &ix.wls[nb[i].wl]
		if class(p) != best {
			continue
		}
		dx := 0.0
		if q.f.BatchSize > 0 && p.f.BatchSize > 0 {
			dx = log2b(p.f.BatchSize) - xq
		}
		w := math.Exp(-0.5 * math.Abs(dx))
		sw += w
		sx += w * dx
		sy += w * nb[i].y
		sxx += w * dx * dx
		sxy += w * dx * nb[i].y
	}
	// Normal equations: [sw sx; sx sxx+lambda] [a b] = [sy; sxy+lambda*b0].
	b0 := ix.batchSlope
	det := sw*(sxx+lambda) - sx*sx
	return (sy*(sxx+lambda) - sx*(sxy+lambda*b0)) / det
}

// load normalises raw inputs into a scratch.
func (p *p1Net) load(in *rawInputs, sc *scratch) {
	s := p.net.shape
	for j := 0; j < dq; j++ {
		sc.xq[j] = (in.xq[j] - p.qMean[j]) / p.qStd[j]
	}
	for i := 0; i < s.K; i++ {
		sc.present[i] = in.present[i]
		if !in.present[i] {
			sc.tok[i] = [maxDT]float64{}
			continue
		}
		for j := 0; j < dt-1; j++ {
			sc.tok[i][j] = (in.tok[i][j] - p.tMean[j]) / p.tStd[j]
		}
		sc.tok[i][dt-1] = 1
	}
}

// predict returns the per-GPU log-throughput.
func (p *p1Net) predict(in *rawInputs, sc *scratch) float64 {
	p.load(in, sc)
	return in.base + p.yStd*p.net.forward(sc)
}

// example is one training pair: a workload's trusted slot with its inputs.
type example struct {
	in  rawInputs
	y   float64
	wl  int
	gpu string
	n   int
}

// buildExamples makes one example per trusted (workload, type, count) of ix whose type has
// neighbours; only workloads with include(id) true become targets.
func buildExamples(ix *index, gf map[string]gpuFeatures, k int, include func(int) bool) []example {
	var out []example
	for id := range ix.wls {
		if include != nil && !include(id) {
			continue
		}
		for _, g := range ix.gpus {
			for _, c := range ix.trusted[wgKey{id, g}] {
				var ex example
				if !buildInputs(ix, &ix.wls[id], id, g, c.n, gf[g], k, &ex.in) {
					continue
				}
				ex.y, ex.wl, ex.gpu, ex.n = c.y, id, g, c.n
				out = append(out, ex)
			}
		}
	}
	return out
}

// trainConfig sizes a P1 training run.
type trainConfig struct {
	K, H   int
	Epochs int
	Batch  int
	LR     float64
	L2     float64
}

func defaultTrainConfig() trainConfig {
	return trainConfig{K: 6, H: 8, Epochs: 40, Batch: 16, LR: 0.01, L2: 0.03}
}

// trainP1 fits one architecture on the examples. Deterministic for a given seed.
func trainP1(exs []example, arch string, cfg trainConfig, seed uint64) (*p1Net, error) {
	if len(exs) == 0 {
		return nil, fmt.Errorf("train %s: no training examples (the catalog needs at least two workloads measured on a common GPU type)", arch)
	}
	rng := rand.New(rand.NewPCG(seed, archSalt(arch)))
	nt, err := newNet(netShape{Arch: arch, DQ: dq, DT: dt, K: cfg.K, H: cfg.H}, rng)
	if err != nil {
		return nil, err
	}
	p := &p1Net{net: nt}
	p.fitNorm(exs, cfg.K)
	sc := new(scratch)
	targets := make([]float64, len(exs))
	for i := range exs {
		targets[i] = (exs[i].y - exs[i].in.base) / p.yStd
	}
	order := make([]int, len(exs))
	for i := range order {
		order[i] = i
	}
	g := make([]float64, len(nt.w))
	// Decay1 and Decay2 are the decimal complements the bundled model was fitted with (see
	// nn.Adam); Step adds the L2 term to the gradient as this loop always did.
	opt := &nn.Adam{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Decay1: 0.1, Decay2: 0.001, L2: cfg.L2,
		M: make([]float64, len(nt.w)), V: make([]float64, len(nt.w))}
	steps := cfg.Epochs * ((len(exs) + cfg.Batch - 1) / cfg.Batch)
	step := 0
	for ep := 0; ep < cfg.Epochs; ep++ {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for lo := 0; lo < len(order); lo += cfg.Batch {
			hi := min(lo+cfg.Batch, len(order))
			for i := range g {
				g[i] = 0
			}
			for _, e := range order[lo:hi] {
				p.load(&exs[e].in, sc)
				out := nt.forward(sc)
				nt.backward(sc, 2*(out-targets[e])/float64(hi-lo), g)
			}
			step++
			// Cosine decay to 5 % of the base rate.
			opt.LR = cfg.LR * (0.05 + 0.95*0.5*(1+math.Cos(math.Pi*float64(step)/float64(steps))))
			opt.Step(nt.w, g)
		}
	}
	return p, nil
}

func archSalt(arch string) uint64 {
	for i, a := range archs {
		if a == arch {
			return uint64(i + 1)
		}
	}
	return 0
}

// fitNorm sets the input and target normalisation from the training examples.
func (p *p1Net) fitNorm(exs []example, k int) {
	var qs, qss [dq]float64
	var ts, tss [dt]float64
	var nt, yss float64
	for i := range exs {
		in := &exs[i].in
		for j := 0; j < dq; j++ {
			qs[j] += in.xq[j]
			qss[j] += in.xq[j] * in.xq[j]
		}
		for t := 0; t < k; t++ {
			if !in.present[t] {
				continue
			}
			nt++
			for j := 0; j < dt; j++ {
				ts[j] += in.tok[t][j]
				tss[j] += in.tok[t][j] * in.tok[t][j]
			}
		}
		d := exs[i].y - in.base
		yss += d * d
	}
	n := float64(len(exs))
	std := func(s, ss, n float64) (float64, float64) {
		if n == 0 {
			return 0, 1
		}
		mu := s / n
		v := ss/n - mu*mu
		if v < 1e-8 {
			return mu, 1
		}
		return mu, math.Sqrt(v)
	}
	for j := 0; j < dq; j++ {
		p.qMean[j], p.qStd[j] = std(qs[j], qss[j], n)
	}
	for j := 0; j < dt; j++ {
		p.tMean[j], p.tStd[j] = std(ts[j], tss[j], nt)
	}
	p.tMean[dt-1], p.tStd[dt-1] = 0, 1
	p.yStd = math.Sqrt(yss / n)
	if p.yStd < 1e-3 {
		p.yStd = 1e-3
	}
}
