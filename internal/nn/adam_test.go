package nn

import (
	"math"
	"testing"
)

// TestAdamFirstSteps checks updates against values worked out by hand from the paper's
// formulas: the first bias-corrected step moves each parameter by about LR against its
// gradient's sign, clipping rescales the gradient first, and L2 adds L2 x param to it.
func TestAdamFirstSteps(t *testing.T) {
	cases := []struct {
		name   string
		adam   Adam
		params []float64
		grads  [][]float64
		want   []float64
	}{
		{
			name:   "one step moves by lr against the sign",
			adam:   Adam{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
			params: []float64{1, -2, 0},
			grads:  [][]float64{{3, -0.5, 0}},
			// m/c1 = g, sqrt(v/c2) = |g|: the step is lr*g/(|g|+eps).
			want: []float64{1 - 0.1*3/(3+1e-8), -2 + 0.1*0.5/(0.5+1e-8), 0},
		},
		{
			name:   "two equal gradients keep the step size",
			adam:   Adam{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 0},
			params: []float64{0},
			grads:  [][]float64{{2}, {2}},
			want:   []float64{-0.02},
		},
		{
			name:   "clipping scales the gradient to the clip norm",
			adam:   Adam{LR: 1, Beta1: 0.9, Beta2: 0.999, Eps: 0, Clip: 0.5},
			params: []float64{0, 0},
			grads:  [][]float64{{3, 4}},
			// The clipped gradient is (0.3, 0.4); a first step is still lr x sign.
			want: []float64{-1, -1},
		},
		{
			name:   "l2 adds a pull towards zero",
			adam:   Adam{LR: 0.5, Beta1: 0.9, Beta2: 0.999, Eps: 0, L2: 1},
			params: []float64{2},
			grads:  [][]float64{{-1}}, // -1 + 1 x 2 = +1: the parameter moves down
			want:   []float64{1.5},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := c.adam
			a.M, a.V = make([]float64, len(c.params)), make([]float64, len(c.params))
			p := append([]float64(nil), c.params...)
			for _, g := range c.grads {
				a.Step(p, append([]float64(nil), g...))
			}
			for i := range p {
				if math.Abs(p[i]-c.want[i]) > 1e-12 {
					t.Errorf("param %d: %v, want %v", i, p[i], c.want[i])
				}
			}
			if a.T != len(c.grads) {
				t.Errorf("t = %d after %d steps", a.T, len(c.grads))
			}
		})
	}
}

// TestAdamDecayOverride shows why Decay1 exists: the decimal complement 0.1 and the float64
// difference 1-0.9 are different numbers, so the first moment differs in its last bits.
func TestAdamDecayOverride(t *testing.T) {
	run := func(d1 float64) float64 {
		a := Adam{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Decay1: d1, M: []float64{0}, V: []float64{0}}
		a.Step([]float64{0}, []float64{1})
		return a.M[0]
	}
	beta1 := 0.9
	if got := run(0); got != (1-beta1)*1 {
		t.Errorf("computed complement: m = %v, want %v", got, 1-beta1)
	}
	if got := run(0.1); got != 0.1 {
		t.Errorf("decimal complement: m = %v, want 0.1", got)
	}
	if 1-beta1 == 0.1 {
		t.Fatal("1-0.9 rounds to 0.1 here; the override is pointless")
	}
}

func TestAdamValidate(t *testing.T) {
	good := NewAdam(3, 0.1)
	cases := []struct {
		name string
		a    *Adam
		n    int
		ok   bool
	}{
		{"fresh", good, 3, true},
		{"wrong length", good, 4, false},
		{"zero lr", &Adam{LR: 0, M: make([]float64, 3), V: make([]float64, 3)}, 3, false},
		{"negative t", &Adam{LR: 1, T: -1, M: make([]float64, 3), V: make([]float64, 3)}, 3, false},
	}
	for _, c := range cases {
		if err := c.a.Validate(c.n, "adam"); (err == nil) != c.ok {
			t.Errorf("%s: Validate = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestAdamCloneIsDeep(t *testing.T) {
	a := NewAdam(2, 0.1)
	c := a.Clone()
	c.Step([]float64{0, 0}, []float64{1, 1})
	if a.T != 0 || a.M[0] != 0 || a.V[0] != 0 {
		t.Errorf("stepping the clone moved the original: t=%d m=%v v=%v", a.T, a.M, a.V)
	}
}

func BenchmarkAdamStep(b *testing.B) {
	const n = 2 * (16*32 + 32 + 32*32 + 32 + 32 + 1)
	a := NewAdam(n, 1e-3)
	p, g := make([]float64, n), make([]float64, n)
	for i := range g {
		g[i] = 1e-3 * float64(i%11-5)
	}
	b.ReportAllocs()
	for b.Loop() {
		a.Step(p, g)
	}
}
