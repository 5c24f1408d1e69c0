package nn

import "math"

// Dot is the left-to-right sum of a[i] x b[i] over a. Unlike BLAS's unrolled kernels its
// order is fixed, which the predictor's fitted models depend on.
func Dot(a, b []float64) float64 {
	var s float64
	for i, x := range a {
		s += x * b[i]
	}
	return s
}

// Dense computes out = act(W x + b) for one vector: W is row-major with len(out) rows of
// len(x) columns (a view into a flat parameter slice may be longer), b may be nil, and act
// applies tanh. Each row is Dot(W_r, x) + b_r, in that order.
func Dense(w, b, x, out []float64, tanh bool) {
	nx := len(x)
	for r := range out {
		z := Dot(w[r*nx:(r+1)*nx], x)
		if b != nil {
			z += b[r]
		}
		if tanh {
			z = math.Tanh(z)
		}
		out[r] = z
	}
}
