package nn

import (
	"fmt"
	"math"
)

// Adam is the Adam optimiser (Kingma & Ba) over a flat parameter vector, with optional
// global-norm gradient clipping and L2 regularisation. Its moments are part of a ranker
// checkpoint so training resumes exactly.
type Adam struct {
	LR    float64 `json:"lr"`
	Beta1 float64 `json:"beta1"`
	Beta2 float64 `json:"beta2"`
	Eps   float64 `json:"eps"`
	// Clip rescales a gradient whose Euclidean norm exceeds it (0: no clipping).
	Clip float64   `json:"clip"`
	T    int       `json:"t"`
	M    []float64 `json:"m"`
	V    []float64 `json:"v"`
	// L2 adds L2 x param to each gradient component before the moments (coupled weight
	// decay); 0 leaves the gradient untouched.
	L2 float64 `json:"l2,omitempty"`
	// Decay1 and Decay2 are the moment weights of the new gradient, 1-Beta1 and 1-Beta2. When
	// zero, Step computes them in float64 from the betas. The predictor's models were fitted
	// with the correctly rounded decimals 0.1 and 0.001, which differ from float64(1-0.9) in
	// the last bit, so it sets them; not serialised (a checkpoint's optimiser uses the betas).
	Decay1 float64 `json:"-"`
	Decay2 float64 `json:"-"`
}

// NewAdam returns an optimiser for n parameters with the usual defaults and clipping at 0.5.
func NewAdam(n int, lr float64) *Adam {
	return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Clip: 0.5, M: make([]float64, n), V: make([]float64, n)}
}

// Step applies one update for gradient g (of a loss to minimise) to params. With Clip set it
// rescales g in place. It does not allocate.
func (a *Adam) Step(params, g []float64) {
	if a.Clip > 0 {
		ss := 0.0
		for _, v := range g {
			ss += v * v
		}
		if norm := math.Sqrt(ss); norm > a.Clip {
			s := a.Clip / norm
			for i := range g {
				g[i] *= s
			}
		}
	}
	a.T++
	c1 := 1 - math.Pow(a.Beta1, float64(a.T))
	c2 := 1 - math.Pow(a.Beta2, float64(a.T))
	d1, d2 := a.Decay1, a.Decay2
	if d1 == 0 {
		d1 = 1 - a.Beta1
	}
	if d2 == 0 {
		d2 = 1 - a.Beta2
	}
	for i, gi := range g {
		if a.L2 != 0 {
			gi += a.L2 * params[i]
		}
		a.M[i] = a.Beta1*a.M[i] + d1*gi
		a.V[i] = a.Beta2*a.V[i] + d2*gi*gi
		params[i] -= a.LR * (a.M[i] / c1) / (math.Sqrt(a.V[i]/c2) + a.Eps)
	}
}

// Validate checks an optimiser read from a file for n parameters; field names it in errors.
func (a *Adam) Validate(n int, field string) error {
	if len(a.M) != n || len(a.V) != n {
		return fmt.Errorf("%s: %d/%d moments, expected %d each", field, len(a.M), len(a.V), n)
	}
	if a.LR <= 0 || a.T < 0 {
		return fmt.Errorf("%s: lr %v and t %d, expected lr > 0 and t >= 0", field, a.LR, a.T)
	}
	return nil
}

// Clone returns a deep copy (a resumed or fine-tuned run must not move the source's moments).
func (a *Adam) Clone() *Adam {
	c := *a
	c.M, c.V = append([]float64(nil), a.M...), append([]float64(nil), a.V...)
	return &c
}
