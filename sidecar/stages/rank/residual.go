package rank

import (
	"math/rand/v2"

	"github.com/hetgpu/hetgpu/internal/nn"
)

// A residual policy scores a job as the fallback heuristic does plus a learned correction:
//
//	score = Heuristic{}.Score(raw row) + actor(normalised row)
//
// Its actor's output layer starts at zero, so a fresh residual policy orders exactly as the
// heuristic and training can move it only where rollouts show a better order. A plain policy
// has to learn the heuristic's order first (imitation) and, on traces it never saw, drifted
// away from it for the worse.

// NewResidualPolicy is NewPolicy with Residual set and the actor's output layer zeroed.
func NewResidualPolicy(schema Schema, hidden []int, rng *rand.Rand) (*Policy, error) {
	p, err := NewPolicy(schema, hidden, rng)
	if err != nil {
		return nil, err
	}
	p.Residual = true
	zeroOutput(p.Actor)
	return p, nil
}

// zeroOutput clears the last layer's weights and bias.
func zeroOutput(m *nn.MLP) {
	l := len(m.W) - 1
	clear(m.W[l].Data)
	clear(m.B[l])
}

// AddBase adds, for a residual policy, the heuristic's score of each of the n raw rows to
// logits; it does nothing for a plain policy.
func (p *Policy) AddBase(logits, raw []float64, n int) {
	if !p.Residual {
		return
	}
	f := p.NumFeatures()
	for j := 0; j < n; j++ {
		logits[j] += Heuristic{}.Score(raw[j*f : (j+1)*f])
	}
}

// BaseScores writes the heuristic's score of each of the n raw rows into out (zeros for a plain
// policy): the fixed part of a residual policy's logits, which training records per decision.
func (p *Policy) BaseScores(raw []float64, n int, out []float64) {
	clear(out[:n])
	p.AddBase(out, raw, n)
}
