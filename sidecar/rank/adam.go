package rank

import (
	"fmt"
	"math"
)

// Adam is the Adam optimiser (Kingma & Ba) over a flat parameter vector, with global-norm
// gradient clipping. Its moments are part of a checkpoint so training resumes exactly.
type Adam struct {
	LR    float64   `json:"lr"`
	Beta1 float64   `json:"beta1"`
	Beta2 float64   `json:"beta2"`
	Eps   float64   `json:"eps"`
	Clip  float64   `json:"clip"`
	T     int       `json:"t"`
	M     []float64 `json:"m"`
	V     []float64 `json:"v"`
}

// NewAdam returns an optimiser for n parameters.
func NewAdam(n int, lr float64) *Adam {
	return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Clip: 0.5, M: make([]float64, n), V: make([]float64, n)}
}

// Step applies one update for gradient g (of a loss to minimise) to params.
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
	for i, gi := range g {
		a.M[i] = a.Beta1*a.M[i] + (1-a.Beta1)*gi
		a.V[i] = a.Beta2*a.V[i] + (1-a.Beta2)*gi*gi
		params[i] -= a.LR * (a.M[i] / c1) / (math.Sqrt(a.V[i]/c2) + a.Eps)
	}
}

func (a *Adam) validate(n int, field string) error {
	if len(a.M) != n || len(a.V) != n {
		return fmt.Errorf("%s: %d/%d moments, expected %d each", field, len(a.M), len(a.V), n)
	}
	if a.LR <= 0 || a.T < 0 {
		return fmt.Errorf("%s: lr %v and t %d, expected lr > 0 and t >= 0", field, a.LR, a.T)
	}
	return nil
}
