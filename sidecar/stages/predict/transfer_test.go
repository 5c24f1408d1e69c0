package predict

import (
	"math"
	"testing"
)

// TestInterpolate checks the same-model batch-size interpolation of slot ratios: linear in
// log2 batch between the bracketing siblings, the nearest sibling outside them, double
// differences, and no answer with fewer than two siblings measured on the slots.
func TestInterpolate(t *testing.T) {
	nan := math.NaN()
	// Five slots per workload (slot 4 measured on one sibling only). Workload 0 is the query (batch 2^5); siblings at 2^4, 2^6
	// and 2^8. Slot ratios y[0]-y[1]: 0.2 at lb 4, 0.6 at lb 6, 1.0 at lb 8.
	g := &grid{stride: 5, lb: []float64{5, 4, 6, 8, 3}, sib: [][]int{{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}, nil}}
	g.vals = []float64{
		nan, nan, nan, nan, nan,
		1.2, 1.0, 0.5, 0.4, 0.3,
		1.6, 1.0, 0.5, 0.2, nan,
		2.0, 1.0, nan, nan, nan,
		9, 9, 9, 9, 9,
	}
	cases := []struct {
		name   string
		self   int
		sl     [4]int
		lbSelf float64
		want   float64
		ok     bool
	}{
		{"between siblings", 0, [4]int{0, 1, -1, -1}, 5, 0.4, true},
		{"above all siblings", 0, [4]int{0, 1, -1, -1}, 9, 1.0, true},
		{"below all siblings", 0, [4]int{0, 1, -1, -1}, 3, 0.2, true},
		// (y0 - y1) - (y2 - y3): 0.1 at lb 4, 0.3 at lb 6 -> 0.2 at lb 5.
		{"double difference", 0, [4]int{0, 1, 2, 3}, 5, 0.2, true},
		{"one sibling on the slots", 0, [4]int{0, 4, -1, -1}, 5, 0, false},
		{"batch unknown", 4, [4]int{0, 1, -1, -1}, 3, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g.lb[c.self] = c.lbSelf
			r, v, ok := g.interpolate(c.self, c.sl)
			if ok != c.ok || ok && (math.Abs(r-c.want) > 1e-9 || !(v >= interpVar)) {
				t.Errorf("interpolate = %.4f (variance %.4f), %v; want %.4f, %v", r, v, ok, c.want, c.ok)
			}
		})
	}
}

// TestConditional checks the conditional-Gaussian transfer on an additive table (workload
// level + slot effect, with a small interaction so the covariance is not singular): the
// held-out slot of a new workload follows its own level, not the population mean, and too
// few covering workloads give no answer.
func TestConditional(t *testing.T) {
	const nw, stride = 8, 4
	g := &grid{stride: stride, vals: make([]float64, nw*stride)}
	slot := []float64{0, 0.7, -0.4, 1.1}
	for p := 0; p < nw; p++ {
		for s := 0; s < stride; s++ {
			g.vals[p*stride+s] = float64(p)*0.3 + slot[s] + 0.01*float64((p*7+s*3)%5)
		}
	}
	w := make([]float64, nw)
	for i := range w {
		w[i] = 1
	}
	// The query (workload 0) runs 2.0 above the population on slots 0..2.
	own := []ownSlot{{slot: 0, y: 3 + slot[0], runs: 4}, {slot: 1, y: 3 + slot[1], runs: 4}, {slot: 2, y: 3 + slot[2], runs: 4}}
	y, v, ok := g.conditional(0, w, own, 0.05, 3)
	if want := 3 + slot[3]; !ok || math.Abs(y-want) > 0.1 || !(v > 0 && v < 0.05) {
		t.Errorf("conditional = %.3f (variance %.4f), %v; want about %.3f with a small variance", y, v, ok, want)
	}
	for p := 3; p < nw; p++ {
		g.vals[p*stride+3] = math.NaN()
	}
	if _, _, ok := g.conditional(0, w, own, 0.05, 3); ok {
		t.Error("conditional answered with two covering workloads; want no answer below cgMinRows")
	}
}
