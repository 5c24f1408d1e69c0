package rank

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/hetgpu/hetgpu/internal/nn"
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
	Actor  *nn.MLP
	Critic *nn.MLP
	// Residual makes the actor a correction of the fallback heuristic: a job's score is
	// Heuristic{}.Score of its raw row plus the actor's output (see residual.go).
	Residual bool
}

// NewPolicy builds a randomly initialised policy for schema with the given hidden widths.
func NewPolicy(schema Schema, hidden []int, rng *rand.Rand) (*Policy, error) {
	if err := schema.Validate(); err != nil {
		return nil, err
	}
	f, g := len(schema.Features), len(schema.Globals)
	as := append(append([]int{f}, hidden...), 1)
	cs := append(append([]int{2*f + g}, hidden...), 1)
	actor, err := nn.NewMLP(as...)
	if err != nil {
		return nil, fmt.Errorf("actor: %w", err)
	}
	critic, err := nn.NewMLP(cs...)
	if err != nil {
		return nil, fmt.Errorf("critic: %w", err)
	}
	actor.Init(rng, 0.1)
	critic.Init(rng, 1)
	return &Policy{Schema: schema, Norm: NewNormalizer(f), GNorm: NewNormalizer(g), Actor: actor, Critic: critic}, nil
}

// Clone returns a deep copy.
func (p *Policy) Clone() *Policy {
	return &Policy{Schema: p.Schema, Norm: p.Norm.Clone(), GNorm: p.GNorm.Clone(), Actor: p.Actor.Clone(), Critic: p.Critic.Clone(), Residual: p.Residual}
}

// NumFeatures and NumGlobals are the policy's input widths.
func (p *Policy) NumFeatures() int { return len(p.Schema.Features) }
func (p *Policy) NumGlobals() int  { return len(p.Schema.Globals) }

// CriticInput writes the critic's input for n normalised job rows x: the rows' mean and max
// per feature, then the normalised globals.
func (p *Policy) CriticInput(x []float64, n int, globals []float64, cin []float64) {
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

// OrderJobs fills idx[:n] with the job order for the given logits: masked-in jobs first (the ones
// the agent chooses among), the first k of them drawn from the Plackett-Luce distribution of
// the logits when rng is non-nil (Gumbel-top-k), the rest by descending logit. keys receives
// a score per job that sorts the same way (higher first).
func OrderJobs(logits []float64, mask []bool, k int, rng *rand.Rand, idx []int, keys []float64) {
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
