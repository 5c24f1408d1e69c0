package ppo

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestPLLogProbGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, tc := range []struct {
		n      int
		mask   []bool
		prefix []int
	}{
		{n: 5, prefix: []int{2}},
		{n: 6, prefix: []int{4, 0, 5}},
		{n: 6, mask: []bool{true, false, true, true, false, true}, prefix: []int{3, 0}},
	} {
		z := make([]float64, tc.n)
		for i := range z {
			z[i] = rng.NormFloat64()
		}
		taken := make([]bool, tc.n)
		probs := make([]float64, tc.n)
		dz := make([]float64, tc.n)
		plLogProb(z, tc.mask, tc.prefix, taken, probs, dz)
		for i := range z {
			old := z[i]
			h := 1e-6
			z[i] = old + h
			lp := plLogProb(z, tc.mask, tc.prefix, taken, probs, nil)
			z[i] = old - h
			lm := plLogProb(z, tc.mask, tc.prefix, taken, probs, nil)
			z[i] = old
			if num := (lp - lm) / (2 * h); math.Abs(num-dz[i]) > 1e-6 {
				t.Fatalf("n=%d prefix %v: dz[%d] analytic %g numeric %g", tc.n, tc.prefix, i, dz[i], num)
			}
			if tc.mask != nil && !tc.mask[i] && dz[i] != 0 {
				t.Fatalf("masked-out job %d has gradient %g", i, dz[i])
			}
		}
		// Entropy gradient.
		for i := range dz {
			dz[i] = 0
		}
		firstPickEntropy(z, tc.mask, probs, dz, 1)
		for i := range z {
			old := z[i]
			h := 1e-6
			z[i] = old + h
			hp := firstPickEntropy(z, tc.mask, probs, nil, 0)
			z[i] = old - h
			hm := firstPickEntropy(z, tc.mask, probs, nil, 0)
			z[i] = old
			if num := (hp - hm) / (2 * h); math.Abs(num-dz[i]) > 1e-6 {
				t.Fatalf("entropy dz[%d] analytic %g numeric %g", i, dz[i], num)
			}
		}
	}
}
