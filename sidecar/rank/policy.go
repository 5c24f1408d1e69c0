package rank

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// MaxWindow is the most pending jobs one policy evaluation looks at (RLTune's window). In a
// longer queue the jobs with the least estimated GPU-time form the window (Ranker.Rank).
const MaxWindow = 128

// Policy is the learned prioritiser: an actor MLP that scores each job from its own normalised
// feature row (shared weights, so any queue length works) and a critic MLP that values the
// whole queue from pooled features (mean and max over the window) and cluster-level inputs.
type Policy struct {
	Schema Schema
	// Norm standardises job features, GNorm the cluster-level inputs.
	Norm   *Normalizer
	GNorm  *Normalizer
	Actor  *MLP
	Critic *MLP
}

// NewPolicy builds a randomly initialised policy for schema with the given hidden widths.
func NewPolicy(schema Schema, hidden []int, rng *rand.Rand) (*Policy, error) {
	if err := schema.Validate(); err != nil {
		return nil, err
	}
	f, g := len(schema.Features), len(schema.Globals)
	as := append(append([]int{f}, hidden...), 1)
	cs := append(append([]int{2*f + g}, hidden...), 1)
	actor, err := NewMLP(as...)
	if err != nil {
		return nil, fmt.Errorf("actor: %w", err)
	}
	critic, err := NewMLP(cs...)
	if err != nil {
		return nil, fmt.Errorf("critic: %w", err)
	}
	actor.Init(rng, 0.1)
	critic.Init(rng, 1)
	return &Policy{Schema: schema, Norm: NewNormalizer(f), GNorm: NewNormalizer(g), Actor: actor, Critic: critic}, nil
}

// Clone returns a deep copy.
func (p *Policy) Clone() *Policy {
	return &Policy{Schema: p.Schema, Norm: p.Norm.Clone(), GNorm: p.GNorm.Clone(), Actor: p.Actor.Clone(), Critic: p.Critic.Clone()}
}

// NumFeatures and NumGlobals are the policy's input widths.
func (p *Policy) NumFeatures() int { return len(p.Schema.Features) }
func (p *Policy) NumGlobals() int  { return len(p.Schema.Globals) }

// scratch is the per-caller state of policy evaluation: network workspaces and buffers sized
// for MaxWindow jobs, so a ranking round allocates nothing.
type scratch struct {
	aws, cws *Workspace
	x        []float64 // normalised job rows
	cin      []float64 // critic input
	logits   []float64
	keys     []float64
	idx      []int
	probs    []float64
	taken    []bool
	dz       []float64
}

func (p *Policy) newScratch() *scratch {
	f := p.NumFeatures()
	return &scratch{
		aws:    p.Actor.NewWorkspace(MaxWindow),
		cws:    p.Critic.NewWorkspace(1),
		x:      make([]float64, MaxWindow*f),
		cin:    make([]float64, p.Critic.In()),
		logits: make([]float64, MaxWindow),
		keys:   make([]float64, MaxWindow),
		idx:    make([]int, MaxWindow),
		probs:  make([]float64, MaxWindow),
		taken:  make([]bool, MaxWindow),
		dz:     make([]float64, MaxWindow),
	}
}

// logitsOf runs the actor on n normalised rows (in s.x) into s.logits.
func (p *Policy) logitsOf(s *scratch, n int) []float64 {
	out := p.Actor.Forward(s.aws, s.x, n)
	copy(s.logits[:n], out)
	return s.logits[:n]
}

// criticInput writes the pooled features and normalised globals of n normalised rows.
func (p *Policy) criticInput(x []float64, n int, globals []float64, cin []float64) {
	f := p.NumFeatures()
	mean, max := cin[:f], cin[f:2*f]
	for i := 0; i < f; i++ {
		mean[i], max[i] = 0, math.Inf(-1)
	}
	for r := 0; r < n; r++ {
		row := x[r*f : (r+1)*f]
		for i, v := range row {
			mean[i] += v
			if v > max[i] {
				max[i] = v
			}
		}
	}
	for i := 0; i < f; i++ {
		if n > 0 {
			mean[i] /= float64(n)
		} else {
			max[i] = 0
		}
	}
	g := cin[2*f:]
	copy(g, globals)
	p.GNorm.Apply(g)
}

// value runs the critic on a prepared input.
func (p *Policy) value(ws *Workspace, cin []float64) float64 {
	return p.Critic.Forward(ws, cin, 1)[0]
}

// orderJobs fills idx[:n] with the job order for the given logits: masked-in jobs first (the ones
// the agent chooses among), the first k of them drawn from the Plackett-Luce distribution of
// the logits when rng is non-nil (Gumbel-top-k), the rest by descending logit. keys receives
// a score per job that sorts the same way (higher first).
func orderJobs(logits []float64, mask []bool, k int, rng *rand.Rand, idx []int, keys []float64) {
	n := len(logits)
	for i := 0; i < n; i++ {
		idx[i] = i
		keys[i] = logits[i]
		if rng != nil && (mask == nil || mask[i]) {
			// Gumbel noise turns a sort into a Plackett-Luce sample.
			u := rng.Float64()
			for u == 0 {
				u = rng.Float64()
			}
			keys[i] += -math.Log(-math.Log(u))
		}
	}
	// Masked-out jobs sort after every masked-in one; masked-in ones past the sampled prefix use
	// their plain logits so the stochastic part of the action is exactly the first k picks.
	slices.SortStableFunc(idx[:n], func(a, b int) int {
		ma, mb := mask == nil || mask[a], mask == nil || mask[b]
		switch {
		case ma && !mb:
			return -1
		case mb && !ma:
			return 1
		}
		return cmp.Compare(keys[b], keys[a])
	})
	if rng != nil {
		m := 0
		for _, i := range idx[:n] {
			if mask == nil || mask[i] {
				m++
			}
		}
		if k < m {
			rest := idx[k:m]
			slices.SortStableFunc(rest, func(a, b int) int { return cmp.Compare(logits[b], logits[a]) })
			for _, i := range rest {
				keys[i] = logits[i]
			}
		}
	}
	strictlyDecreasing(idx[:n], keys)
}

// strictlyDecreasing nudges tied or out-of-order keys so they strictly decrease along order,
// for callers that sort by score.
func strictlyDecreasing(order []int, keys []float64) {
	for pos := 1; pos < len(order); pos++ {
		prev := keys[order[pos-1]]
		if keys[order[pos]] >= prev {
			keys[order[pos]] = prev - 1e-9*math.Max(1, math.Abs(prev))
		}
	}
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
