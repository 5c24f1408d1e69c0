package nn

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

// TestMLPForwardKnownValues pins a tiny network's output to values worked out by hand, so a
// wrong layer order or a missing activation fails even where the gradient check agrees with it.
func TestMLPForwardKnownValues(t *testing.T) {
	m, err := NewMLP(2, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Layer 0: W = [[1, 2], [-1, 0.5]], b = [0.5, 0]; layer 1: W = [[2, -3]], b = [1].
	copy(m.Params, []float64{1, 2, -1, 0.5, 0.5, 0, 2, -3, 1})
	ws := m.NewWorkspace(2)
	out := m.Forward(ws, []float64{0.25, -0.5, 0, 0}, 2)
	for i, c := range []struct{ h0, h1 float64 }{
		{math.Tanh(0.25 - 1 + 0.5), math.Tanh(-0.25 - 0.25)},
		{math.Tanh(0.5), math.Tanh(0)},
	} {
		want := 2*c.h0 - 3*c.h1 + 1
		if math.Abs(out[i]-want) > 1e-12 {
			t.Errorf("row %d: %v, want %v", i, out[i], want)
		}
	}
}

const benchRows = 128

func benchMLP(b *testing.B) (*MLP, *Workspace, []float64) {
	m, err := NewMLP(16, 32, 32, 1)
	if err != nil {
		b.Fatal(err)
	}
	m.Init(rand.New(rand.NewPCG(1, 1)), 1)
	x := make([]float64, benchRows*m.In())
	for i := range x {
		x[i] = float64(i%7) / 7
	}
	return m, m.NewWorkspace(benchRows), x
}

// BenchmarkMLPForward128 is one ranking decision: 128 job rows through a 16-32-32-1 actor.
func BenchmarkMLPForward128(b *testing.B) {
	m, ws, x := benchMLP(b)
	b.ReportAllocs()
	for b.Loop() {
		m.Forward(ws, x, benchRows)
	}
}

// BenchmarkMLPBackward128 is the gradient of one 128-row decision.
func BenchmarkMLPBackward128(b *testing.B) {
	m, ws, x := benchMLP(b)
	d := make([]float64, benchRows)
	for i := range d {
		d[i] = 0.01 * float64(i%5-2)
	}
	g := make([]float64, len(m.Params))
	m.Forward(ws, x, benchRows)
	b.ReportAllocs()
	for b.Loop() {
		m.Backward(ws, d, benchRows, g)
	}
}
