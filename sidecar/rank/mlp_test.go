package rank

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMLPBackwardMatchesFiniteDifferences checks the analytic gradient of a scalar loss
// L = sum_r w_r * out_r against central differences.
func TestMLPBackwardMatchesFiniteDifferences(t *testing.T) {
	for _, sizes := range [][]int{{3, 1}, {4, 5, 1}, {6, 8, 7, 2}} {
		rng := rand.New(rand.NewPCG(1, 2))
		m, err := NewMLP(sizes...)
		if err != nil {
			t.Fatal(err)
		}
		m.Init(rng, 1)
		for i := range m.Params {
			m.Params[i] += 0.1 * rng.NormFloat64() // non-zero biases too
		}
		rows := 5
		x := make([]float64, rows*m.In())
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		w := make([]float64, rows*m.Out())
		for i := range w {
			w[i] = rng.NormFloat64()
		}
		ws := m.NewWorkspace(rows)
		loss := func() float64 {
			out := m.Forward(ws, x, rows)
			s := 0.0
			for i, v := range out {
				s += w[i] * v
			}
			return s
		}
		loss()
		grad := make([]float64, len(m.Params))
		m.Backward(ws, w, rows, grad)
		for i := range m.Params {
			old := m.Params[i]
			h := 1e-6
			m.Params[i] = old + h
			lp := loss()
			m.Params[i] = old - h
			lm := loss()
			m.Params[i] = old
			num := (lp - lm) / (2 * h)
			if math.Abs(num-grad[i]) > 1e-6*math.Max(1, math.Abs(num)) {
				t.Fatalf("sizes %v param %d: analytic %g, numeric %g", sizes, i, grad[i], num)
			}
		}
	}
}

func TestNewMLPRejectsBadSizes(t *testing.T) {
	for _, s := range [][]int{{}, {3}, {3, 0, 1}, {-1, 2}} {
		if _, err := NewMLP(s...); err == nil {
			t.Errorf("NewMLP(%v) accepted", s)
		}
	}
}

func BenchmarkMLPForward128(b *testing.B) {
	m, _ := NewMLP(NumFeatures, 32, 32, 1)
	m.Init(rand.New(rand.NewPCG(1, 1)), 1)
	ws := m.NewWorkspace(MaxWindow)
	x := make([]float64, MaxWindow*NumFeatures)
	for i := range x {
		x[i] = float64(i%7) / 7
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Forward(ws, x, MaxWindow)
	}
}
