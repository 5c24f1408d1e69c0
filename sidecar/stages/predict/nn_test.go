package predict

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGradients compares each architecture's backward pass with central differences, with
// one token missing so masking is exercised too.
func TestGradients(t *testing.T) {
	for _, arch := range archs {
		t.Run(arch, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 9))
			n, err := newNet(netShape{Arch: arch, DQ: 5, DT: 4, K: 3, H: 6}, rng)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n.w {
				n.w[i] += 0.1 * rng.NormFloat64() // non-zero biases too
			}
			sc := new(scratch)
			for j := 0; j < 5; j++ {
				sc.xq[j] = rng.NormFloat64()
			}
			for i := 0; i < 3; i++ {
				sc.present[i] = i != 0
				if !sc.present[i] {
					continue
				}
				for j := 0; j < 4; j++ {
					sc.tok[i][j] = rng.NormFloat64()
				}
			}
			g := make([]float64, len(n.w))
			n.forward(sc)
			n.backward(sc, 1, g)
			const h = 1e-6
			worst := 0.0
			for i := range n.w {
				w0 := n.w[i]
				n.w[i] = w0 + h
				up := n.forward(sc)
				n.w[i] = w0 - h
				dn := n.forward(sc)
				n.w[i] = w0
				num := (up - dn) / (2 * h)
				if d := math.Abs(num - g[i]); d > worst {
					worst = d
				}
				if math.Abs(num-g[i]) > 1e-6*math.Max(1, math.Abs(num)) {
					t.Errorf("weight %d: backward %v, numeric %v", i, g[i], num)
				}
			}
			t.Logf("%s: %d weights, worst gradient error %.2g", arch, len(n.w), worst)
		})
	}
}

func TestNetShapeValidate(t *testing.T) {
	cases := []struct {
		s  netShape
		ok bool
	}{
		{netShape{Arch: ArchFFN, DQ: 9, DT: 9, K: 6, H: 16}, true},
		{netShape{Arch: "lstm", DQ: 9, DT: 9, K: 6, H: 16}, false},
		{netShape{Arch: ArchRNN, DQ: 9, DT: 9, K: maxK + 1, H: 16}, false},
		{netShape{Arch: ArchAttention, DQ: 0, DT: 9, K: 6, H: 16}, false},
	}
	for _, c := range cases {
		if err := c.s.validate(); (err == nil) != c.ok {
			t.Errorf("validate(%+v) = %v, want ok=%v", c.s, err, c.ok)
		}
	}
}
