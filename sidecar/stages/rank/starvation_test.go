package rank

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestStarvationGuard: a job whose wait exceeds Starvation times its runtime gains a point per
// doubling of the excess; below the threshold, and with the guard off, the score is unchanged.
func TestStarvationGuard(t *testing.T) {
	row := func(waitMin, runtimeS float64) []float64 {
		r := make([]float64, NumFeatures)
		r[FWait] = math.Log1p(waitMin)
		r[FGPUs] = 1
		r[FEstKnown] = 1
		r[FRuntime] = math.Log10(runtimeS)
		return r
	}
	off, on := Heuristic{}, Heuristic{Starvation: 10}
	for _, c := range []struct {
		waitMin, runtimeS, gain float64
	}{
		{5, 600, 0},        // waited half its runtime
		{100, 600, 0},      // exactly 10x: no excess yet
		{400, 600, 2},      // 40x: twice the threshold, twice over
		{1600, 6000, 0.68}, // 16x: log2(1.6)
	} {
		r := row(c.waitMin, c.runtimeS)
		if got := on.Score(r) - off.Score(r); math.Abs(got-c.gain) > 0.01 {
			t.Errorf("wait %v min, runtime %v s: gain %.3f, want %.3f", c.waitMin, c.runtimeS, got, c.gain)
		}
	}
}

// The guard holds over a learned order too: a residual policy's greedy decider with a
// threshold puts a job that waited 400x its runtime ahead of a shorter fresh one, and without
// one keeps the heuristic's order.
func TestStarvationGuardOverPolicy(t *testing.T) {
	p, err := NewResidualPolicy(DefaultSchema(), []int{4}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	f := p.NumFeatures()
	raw := make([]float64, 2*f)
	set := func(j int, waitMin, runtimeS float64) {
		r := raw[j*f : (j+1)*f]
		r[FWait], r[FGPUs], r[FEstKnown], r[FRuntime] = math.Log1p(waitMin), 1, 1, math.Log10(runtimeS)
	}
	set(0, 1, 60)     // fresh, a minute long
	set(1, 4000, 600) // waited 400x its ten minutes: 40x the threshold, +5.3 against a 3.3 gap
	first := func(starvation float64) int {
		g := NewGreedy(p)
		g.Starvation = starvation
		order, scores := make([]int, 2), make([]float64, 2)
		if err := g.Act(raw, 2, make([]float64, p.NumGlobals()), nil, 2, order, scores); err != nil {
			t.Fatal(err)
		}
		return order[0]
	}
	if got := first(0); got != 0 {
		t.Errorf("guard off: job %d first, want the short fresh one (0)", got)
	}
	if got := first(10); got != 1 {
		t.Errorf("guard at 10x: job %d first, want the starving one (1)", got)
	}
	r, err := New(p, WithHeuristic(Heuristic{Starvation: 10}))
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := r.decider.(*Greedy); !ok || g.Starvation != 10 {
		t.Errorf("ranker's decider %T %+v: want a greedy one with the guard at 10", r.decider, r.decider)
	}
}
