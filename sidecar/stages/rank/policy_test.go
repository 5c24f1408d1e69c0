package rank

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestGumbelSamplingMatchesPlackettLuce: the first pick of OrderJobs with a random source must
// follow softmax(logits) over the masked-in jobs, and the rest of the order must be by logit.
func TestGumbelSamplingMatchesPlackettLuce(t *testing.T) {
	z := []float64{1, 0, -1, 2}
	mask := []bool{true, true, true, false}
	rng := rand.New(rand.NewPCG(9, 9))
	idx := make([]int, 4)
	keys := make([]float64, 4)
	counts := make([]float64, 4)
	const N = 40000
	for range N {
		OrderJobs(z, mask, 1, rng, idx, keys)
		counts[idx[0]]++
		if idx[3] != 3 {
			t.Fatalf("masked-out job not last: %v", idx)
		}
		for p := 1; p < 4; p++ {
			if keys[idx[p]] >= keys[idx[p-1]] {
				t.Fatalf("scores not strictly decreasing along the order: %v %v", idx, keys)
			}
		}
		// Positions 1..2 are deterministic: by logit.
		if z[idx[1]] < z[idx[2]] {
			t.Fatalf("unsampled tail not in logit order: %v", idx)
		}
	}
	sum := math.Exp(1) + 1 + math.Exp(-1)
	for i, want := range []float64{math.Exp(1) / sum, 1 / sum, math.Exp(-1) / sum, 0} {
		got := counts[i] / N
		if math.Abs(got-want) > 0.01 {
			t.Errorf("job %d first with frequency %.3f, want %.3f", i, got, want)
		}
	}
	// Greedy: plain descending logits, masked-in first.
	OrderJobs(z, mask, 1, nil, idx, keys)
	if want := []int{0, 1, 2, 3}; !slices.Equal(idx, want) {
		t.Errorf("greedy order %v, want %v", idx, want)
	}
}
