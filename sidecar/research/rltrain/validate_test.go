package rltrain

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// A validator's verdict on the heuristic itself is a tie (every ratio 1), and on an order that
// shuffles the queue it is worse than the heuristic somewhere.
func TestValidatorJudges(t *testing.T) {
	ctx := context.Background()
	v, err := NewValidator(ctx, []string{"modern-mix"}, []string{"synthetic:jobs=60,rate=60,seed=3", "synthetic:jobs=60,rate=80,seed=4"}, 1, 2, nil, sim.EstimateReplay{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rank.NewResidualPolicy(rank.DefaultSchema(), []int{8}, testRand())
	if err != nil {
		t.Fatal(err)
	}
	tie, err := v.Judge(ctx, res, 0.97, 1.03)
	if err != nil {
		t.Fatal(err)
	}
	if tie.WorstPooled != 1 || tie.WorstWindow != 1 || tie.Beats() {
		t.Fatalf("heuristic against itself: %s; want every ratio 1 and not-better", tie)
	}
	// Longest GPU-time first: about the heuristic's score reversed.
	anti, err := rank.NewPolicy(rank.DefaultSchema(), nil, testRand())
	if err != nil {
		t.Fatal(err)
	}
	anti.Actor.W[0].Data[rank.FGPUs] = 1
	anti.Actor.W[0].Data[rank.FRuntime] = 4
	worse, err := v.Judge(ctx, anti, 0.97, 1.03)
	if err != nil {
		t.Fatal(err)
	}
	if worse.Beats() || !(worse.WorstPooled > 1) || len(strings.Split(worse.Ratios, ";")) != 6 {
		t.Fatalf("longest first: %s (%s); want worse than the heuristic and 2 pooled + 4 window ratios", worse, worse.Ratios)
	}
}

// With validation traces, training keeps a candidate only when it beats the heuristic there; a
// residual run whose candidates do not keeps its start, exactly the heuristic's order.
func TestTrainKeepsValidatedOrStart(t *testing.T) {
	o := tinyOptions()
	o.Residual, o.EvalEvery, o.Epochs = true, 1, 2
	o.ValidateTraces = []string{"synthetic:jobs=40,rate=60,seed=5"}
	// A pooled limit no policy can meet: nothing is adopted.
	o.ValidateMax = 1e-9
	res, err := Train(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Meta
	if m["validation_epoch"] != "0" || !strings.Contains(m["validation_verdict"], "kept the start") || m["validation_traces"] != o.ValidateTraces[0] {
		t.Fatalf("meta %v; want the start kept", m)
	}
	if res.Best == nil || !res.Best.Residual {
		t.Fatalf("kept %+v, want the residual start", res.Best)
	}
	out := res.Best.Actor.W[len(res.Best.Actor.W)-1].Data
	for _, w := range out {
		if w != 0 {
			t.Fatalf("kept policy's output layer %v, want zeros (the heuristic's order)", out)
		}
	}
	// The candidates were judged (those whose greedy reward beat the baseline, at most
	// DefaultValidateTop).
	if n := strings.Count(m["validation_candidates"], "epoch "); n > DefaultValidateTop {
		t.Fatalf("%d candidates judged, want at most %d: %s", n, DefaultValidateTop, m["validation_candidates"])
	}
}

func testRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
