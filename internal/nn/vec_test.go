package nn

import (
	"math"
	"testing"
)

func TestDense(t *testing.T) {
	w := []float64{1, 2, 3, -1, 0, 0.5, 99} // 2 x 3 and a trailing value that must be ignored
	x := []float64{0.5, -1, 2}
	cases := []struct {
		name string
		b    []float64
		tanh bool
		want []float64
	}{
		{"linear, no bias", nil, false, []float64{0.5 - 2 + 6, -0.5 + 1}},
		{"bias", []float64{1, -1}, false, []float64{5.5, -0.5}},
		{"tanh", []float64{1, -1}, true, []float64{math.Tanh(5.5), math.Tanh(-0.5)}},
	}
	for _, c := range cases {
		out := make([]float64, 2)
		Dense(w, c.b, x, out, c.tanh)
		for i := range out {
			if math.Abs(out[i]-c.want[i]) > 1e-15 {
				t.Errorf("%s: out[%d] = %v, want %v", c.name, i, out[i], c.want[i])
			}
		}
	}
}

// TestDotOrder pins the left-to-right order: with these magnitudes a pairwise or unrolled sum
// gives a different float64.
func TestDotOrder(t *testing.T) {
	a := []float64{1e16, 1, -1e16, 1}
	b := []float64{1, 1, 1, 1}
	// ((1e16 + 1) - 1e16) + 1: 1e16+1 rounds to 1e16, so the sum is 1.
	if got := Dot(a, b); got != 1 {
		t.Errorf("Dot = %v, want 1 (left-to-right)", got)
	}
}

func BenchmarkDense48(b *testing.B) {
	const n = 48
	w, x, out := make([]float64, n*n), make([]float64, n), make([]float64, n)
	for i := range w {
		w[i] = float64(i%13-6) / 13
	}
	for i := range x {
		x[i] = float64(i%5) / 5
	}
	b.ReportAllocs()
	for b.Loop() {
		Dense(w, w[:n], x, out, true)
	}
}
