package ppo

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/hetgpu/hetgpu/internal/nn"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// step is one recorded decision.
type step struct {
	featOff, n   int // rows in traj.feats; n entries in traj.base from baseOff
	baseOff      int
	maskOff      int // n entries in traj.masks
	actOff, k    int // k prefix picks in traj.acts
	cinOff       int // critic input in traj.cins
	logp, value  float64
	adv, ret     float64
	masked, full bool
}

// trajectory is what one rollout recorded.
type trajectory struct {
	feats []float64
	// base holds a residual policy's fixed heuristic scores per recorded row (zeros otherwise).
	base   []float64
	masks  []bool
	acts   []int
	cins   []float64
	steps  []step
	reward float64
}

// Agent makes the ordering decisions of one rollout (or of a greedy evaluation); it is the
// rank.Decider a training environment hands to the ranker. It is not safe for concurrent
// use; each rollout gets its own.
type Agent struct {
	pol       *rank.Policy
	rng       *rand.Rand
	record    bool
	prefixMax int
	// teacher, when set, decides instead of the policy (imitation epochs); the policy learns
	// to reproduce its orders.
	teacher func(raw []float64) float64
	s       *scratch
	traj    trajectory
	// raw statistics of what this rollout saw, merged into the policy's normalisers in order.
	stats, gstats *rank.Normalizer
}

// NewGreedyAgent returns an agent that orders by the policy's scores without exploring or
// recording (evaluation and production).
func NewGreedyAgent(p *rank.Policy) *Agent {
	return &Agent{pol: p, s: newScratch(p), prefixMax: rank.MaxWindow}
}

// Rand is the rollout's random source (nil for a greedy agent); environments that randomise an
// episode draw from it so the rollout stays deterministic.
func (a *Agent) Rand() *rand.Rand { return a.rng }

// Policy is the policy the agent acts with.
func (a *Agent) Policy() *rank.Policy { return a.pol }

// Act orders n jobs. raw holds their n x NumFeatures raw feature rows (not modified), globals
// the raw cluster-level inputs, mask the jobs the agent chooses among (nil = all; the others
// follow, by score), k how many leading picks influence the outcome (0: none does, so the
// decision is neither explored nor recorded). order receives the job indices first to last,
// scores a value per job that sorts the same way (higher first).
func (a *Agent) Act(raw []float64, n int, globals []float64, mask []bool, k int, ord []int, scores []float64) error {
	f := a.pol.NumFeatures()
	if n > rank.MaxWindow {
		return fmt.Errorf("agent: %d jobs exceed the window of %d", n, rank.MaxWindow)
	}
	if len(raw) < n*f || len(globals) < a.pol.NumGlobals() || len(ord) < n || len(scores) < n {
		return fmt.Errorf("agent: buffers too short for %d jobs of %d features", n, f)
	}
	if n == 0 {
		return nil
	}
	s := a.s
	if a.stats != nil {
		a.stats.Update(raw[:n*f])
		a.gstats.Update(globals[:a.pol.NumGlobals()])
	}
	copy(s.x[:n*f], raw[:n*f])
	a.pol.Norm.Apply(s.x[:n*f])
	logits := logitsOf(a.pol, s, n)
	a.pol.BaseScores(raw, n, s.base)
	for j := range logits {
		logits[j] += s.base[j]
	}
	m := n
	if mask != nil {
		m = 0
		for _, ok := range mask[:n] {
			if ok {
				m++
			}
		}
	}
	if m == 0 {
		mask = nil
		m = n
	}
	// k <= 0: the order cannot change the outcome (nothing can start); act greedily and
	// record nothing.
	record := a.record && k > 0
	k = max(1, min(k, m, a.prefixMax))
	var rng *rand.Rand
	if record {
		rng = a.rng
	}
	var msk []bool
	if mask != nil {
		msk = mask[:n]
	}
	if a.teacher != nil {
		for j := 0; j < n; j++ {
			s.keys[j] = a.teacher(raw[j*f : (j+1)*f])
		}
		rank.OrderJobs(s.keys[:n], msk, k, nil, ord[:n], scores[:n])
	} else {
		rank.OrderJobs(logits, msk, k, rng, ord[:n], scores[:n])
	}
	if !record || m < 2 {
		return nil
	}
	// Record the decision for the update.
	t := &a.traj
	st := step{featOff: len(t.feats), n: n, baseOff: len(t.base), maskOff: len(t.masks), actOff: len(t.acts), k: k, cinOff: len(t.cins), masked: msk != nil}
	t.feats = append(t.feats, s.x[:n*f]...)
	t.base = append(t.base, s.base[:n]...)
	if msk != nil {
		t.masks = append(t.masks, msk...)
	}
	t.acts = append(t.acts, ord[:k]...)
	st.logp = plLogProb(logits, msk, ord[:k], s.taken, s.probs, nil)
	cin := s.cin
	a.pol.CriticInput(s.x, n, globals, cin)
	st.value = a.pol.Critic.Forward(s.cws, cin, 1)[0]
	t.cins = append(t.cins, cin...)
	t.steps = append(t.steps, st)
	return nil
}

// scratch is the per-caller state of policy evaluation: network workspaces and buffers sized
// for rank.MaxWindow jobs, so a ranking round allocates nothing.
type scratch struct {
	aws, cws *nn.Workspace
	x        []float64 // normalised job rows
	cin      []float64 // critic input
	logits   []float64
	keys     []float64
	base     []float64
	idx      []int
	probs    []float64
	taken    []bool
	dz       []float64
}

func newScratch(p *rank.Policy) *scratch {
	f := p.NumFeatures()
	return &scratch{
		aws:    p.Actor.NewWorkspace(rank.MaxWindow),
		cws:    p.Critic.NewWorkspace(1),
		x:      make([]float64, rank.MaxWindow*f),
		cin:    make([]float64, p.Critic.In()),
		logits: make([]float64, rank.MaxWindow),
		keys:   make([]float64, rank.MaxWindow),
		base:   make([]float64, rank.MaxWindow),
		idx:    make([]int, rank.MaxWindow),
		probs:  make([]float64, rank.MaxWindow),
		taken:  make([]bool, rank.MaxWindow),
		dz:     make([]float64, rank.MaxWindow),
	}
}

// logitsOf runs p's actor on n normalised rows (in s.x) into s.logits.
func logitsOf(p *rank.Policy, s *scratch, n int) []float64 {
	out := p.Actor.Forward(s.aws, s.x, n)
	copy(s.logits[:n], out)
	return s.logits[:n]
}

// plLogProb returns log P(prefix) under the Plackett-Luce distribution of the logits restricted
// to the masked-in jobs; if dz is non-nil it receives d logP / d logits. taken and probs are
// scratch of length >= len(logits).
func plLogProb(logits []float64, mask []bool, prefix []int, taken []bool, probs []float64, dz []float64) float64 {
	n := len(logits)
	for i := 0; i < n; i++ {
		taken[i] = mask != nil && !mask[i]
		if dz != nil {
			dz[i] = 0
		}
	}
	lp := 0.0
	for _, a := range prefix {
		mx := math.Inf(-1)
		for i := 0; i < n; i++ {
			if !taken[i] && logits[i] > mx {
				mx = logits[i]
			}
		}
		sum := 0.0
		for i := 0; i < n; i++ {
			if !taken[i] {
				probs[i] = math.Exp(logits[i] - mx)
				sum += probs[i]
			}
		}
		lse := mx + math.Log(sum)
		lp += logits[a] - lse
		if dz != nil {
			for i := 0; i < n; i++ {
				if !taken[i] {
					dz[i] -= probs[i] / sum
				}
			}
			dz[a]++
		}
		taken[a] = true
	}
	return lp
}

// firstPickEntropy returns the entropy of the first pick over the masked-in jobs and, if dz is
// non-nil, adds coef x dH/dlogits to it.
func firstPickEntropy(logits []float64, mask []bool, probs []float64, dz []float64, coef float64) float64 {
	n := len(logits)
	mx := math.Inf(-1)
	for i := 0; i < n; i++ {
		if (mask == nil || mask[i]) && logits[i] > mx {
			mx = logits[i]
		}
	}
	sum := 0.0
	for i := 0; i < n; i++ {
		probs[i] = 0
		if mask == nil || mask[i] {
			probs[i] = math.Exp(logits[i] - mx)
			sum += probs[i]
		}
	}
	h := 0.0
	for i := 0; i < n; i++ {
		if probs[i] > 0 {
			probs[i] /= sum
			h -= probs[i] * math.Log(probs[i])
		}
	}
	if dz != nil {
		for i := 0; i < n; i++ {
			if probs[i] > 0 {
				dz[i] += coef * -probs[i] * (math.Log(probs[i]) + h)
			}
		}
	}
	return h
}
