package predict

import (
	"math"
	"testing"
)

// rooflineGrid is a grid of three GPU types with datasheet log speeds 0, 0.8 and 1.4 and
// six population workloads that all follow the datasheet exactly (slope 1) at two GPU
// counts; workload 0 (the query) has no grid values of its own.
func rooflineGrid() *grid {
	speed := []float64{0, 0.8, 1.4}
	nt := len(speed)
	g := &grid{types: []string{"a", "b", "c"}, stride: nt * nBuckets}
	g.lnDS = make([]float64, nt*nt)
	for i := range speed {
		for j := range speed {
			g.lnDS[i*nt+j] = speed[j] - speed[i]
		}
	}
	const nw = 7
	g.vals = make([]float64, nw*g.stride)
	for i := range g.vals {
		g.vals[i] = math.NaN()
	}
	for p := 1; p < nw; p++ {
		for ti, s := range speed {
			for b := 0; b < 2; b++ {
				// A small per-workload wobble so the linking ratios have a spread.
				g.vals[p*g.stride+ti*nBuckets+b] = 0.3*float64(p) + s + 0.9*float64(b) + 0.01*float64((p*5+ti*3+b)%3)
			}
		}
	}
	return g
}

// TestRooflineSlope: a job whose cross-type ratios exceed its neighbours' by half the
// datasheet ratio (a more compute-bound job) on the pairs it ran, at one GPU count and on
// two types at another, is carried to the missing type at that count with its own slope:
// well within the error of the neighbours' ratio alone (delta = 0), which is 0.7 and 0.3
// for the two carried runs. A slot the job ran at no other type's count, or a job with a
// single run, gets no estimate.
func TestRooflineSlope(t *testing.T) {
	g := rooflineGrid()
	speed := []float64{0, 0.8, 1.4}
	w := []float64{1, 1, 1, 1, 1, 1, 1}
	truth := func(ti, b int) float64 { return 5 + 1.5*speed[ti] + 0.9*float64(b) }
	own := []ownSlot{
		{slot: 0*nBuckets + 0, y: truth(0, 0), runs: 2},
		{slot: 1*nBuckets + 0, y: truth(1, 0), runs: 2},
		{slot: 0*nBuckets + 1, y: truth(0, 1), runs: 2},
		{slot: 1*nBuckets + 1, y: truth(1, 1), runs: 2},
		{slot: 2*nBuckets + 1, y: truth(2, 1), runs: 2},
	}
	delta, dv, ok := g.rfSlope(0, w, own, 0.05)
	if !ok || delta < 0.3 || delta > 0.5 || !(dv > 0) {
		t.Fatalf("rfSlope = %.3f (variance %.4f), %v; want about 0.44 (0.5 shrunk by the ridge)", delta, dv, ok)
	}
	rf := g.roofline(0, w, own, 0.05)
	target := 2*nBuckets + 0
	e := rf[target]
	if err := math.Abs(e.y - truth(2, 0)); math.IsInf(e.v, 1) || err > 0.15 || !(e.v > 0) {
		t.Errorf("roofline on the missing type = %.3f (variance %.4f), truth %.3f: error %.3f, want <= 0.15", e.y, e.v, truth(2, 0), err)
	}
	if e := rf[2*nBuckets+2]; !math.IsInf(e.v, 1) {
		t.Errorf("roofline at a count the job never ran = %.3f (variance %v), want none", e.y, e.v)
	}
	one := g.roofline(0, w, own[:1], 0.05)
	for s, e := range one {
		if !math.IsInf(e.v, 1) {
			t.Errorf("one run: roofline on slot %d = %.3f, want none (no pair informs the slope)", s, e.y)
		}
	}
}

// TestCombineRoofline: the roofline moves the combination only with a validated weight,
// by that weight in log space, with the mixed variance.
func TestCombineRoofline(t *testing.T) {
	inf := math.Inf(1)
	base := p2Parts{post: 5, postVar: 1, tr: 1, trVar: 0.01, lrVar: inf, rf: 2, rfVar: 0.02, rhoRf: 0.5}
	y0, v0 := base.combine()
	if math.Abs(y0-1) > 1e-9 || math.Abs(v0-0.01) > 1e-9 {
		t.Fatalf("weight 0: combine = %v (variance %v), want the transfer's 1 (0.01)", y0, v0)
	}
	pt := base
	pt.wRf = 0.25
	y, v := pt.combine()
	wantV := 0.75*0.75*0.01 + 0.25*0.25*0.02 + 2*0.25*0.75*0.5*math.Sqrt(0.01*0.02)
	if math.Abs(y-1.25) > 1e-9 || math.Abs(v-wantV) > 1e-9 {
		t.Errorf("weight 0.25: combine = %v (variance %v), want 1.25 (%v)", y, v, wantV)
	}
	pt.rfVar = inf
	if y, _ := pt.combine(); math.Abs(y-1) > 1e-9 {
		t.Errorf("no roofline estimate: combine = %v, want the transfer's 1", y)
	}
}
