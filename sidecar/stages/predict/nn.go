package predict

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/hetgpu/hetgpu/internal/nn"
)

// The three P1 architectures GOGH compares. Each maps a query vector (the job and the GPU
// type it is asked about) and up to K neighbour tokens (the most similar catalog entries on
// that GPU type, least similar first) to a correction of the neighbours' kernel-weighted
// log-throughput. Weights live in one flat slice so Adam (internal/nn), serialisation and
// determinism tests treat every architecture alike. Forward passes write only into a
// caller-owned scratch, so inference allocates nothing. The cells use nn.Dense and nn.Dot,
// whose fixed left-to-right sums the bundled model was fitted with.
const (
	ArchFFN       = "ffn"
	ArchRNN       = "rnn"
	ArchAttention = "attention"
)

// Archs lists the architectures in the order they are trained and reported.
var archs = [...]string{ArchFFN, ArchRNN, ArchAttention}

// netShape fixes the sizes of a network.
type netShape struct {
	Arch string `json:"arch"`
	// DQ and DT are the query and token widths, K the number of tokens, H the hidden width.
	DQ int `json:"dq"`
	DT int `json:"dt"`
	K  int `json:"k"`
	H  int `json:"h"`
}

// layout holds offsets of each weight block in the flat parameter slice.
type layout struct {
	// FFN: w1 (H x (DQ+K*DT)), b1, w2 (H x H), b2, w3 (H), b3.
	// RNN: wx (H x DT), wh (H x H), bh, then the head.
	// Attention: wq (H x DQ), wk (H x DT), wv (H x DT), then the head.
	// Head (RNN, attention): w1 (H x (H+DQ)), b1, w3 (H), b3.
	w1, b1, w2, b2, w3, b3 int
	wx, wh, bh             int
	wq, wk, wv             int
	n                      int
}

func (s netShape) validate() error {
	switch s.Arch {
	case ArchFFN, ArchRNN, ArchAttention:
	default:
		return fmt.Errorf("arch %q, expected %s, %s or %s", s.Arch, ArchFFN, ArchRNN, ArchAttention)
	}
	if s.DQ < 1 || s.DT < 1 || s.K < 1 || s.H < 1 || s.K > maxK || s.H > maxH || s.DQ > maxDQ || s.DT > maxDT {
		return fmt.Errorf("shape dq=%d dt=%d k=%d h=%d, expected 1..%d, 1..%d, 1..%d, 1..%d", s.DQ, s.DT, s.K, s.H, maxDQ, maxDT, maxK, maxH)
	}
	return nil
}

// Upper bounds that size the fixed scratch arrays; a model file beyond them is rejected.
const (
	maxK  = 12
	maxH  = 48
	maxDQ = 24
	maxDT = 16
)

func (s netShape) layout() layout {
	var l layout
	off := 0
	take := func(n int) int { o := off; off += n; return o }
	switch s.Arch {
	case ArchFFN:
		in := s.DQ + s.K*s.DT
		l.w1, l.b1 = take(s.H*in), take(s.H)
		l.w2, l.b2 = take(s.H*s.H), take(s.H)
	case ArchRNN:
		l.wx, l.wh, l.bh = take(s.H*s.DT), take(s.H*s.H), take(s.H)
		l.w1, l.b1 = take(s.H*(s.H+s.DQ)), take(s.H)
	case ArchAttention:
		l.wq, l.wk, l.wv = take(s.H*s.DQ), take(s.H*s.DT), take(s.H*s.DT)
		l.w1, l.b1 = take(s.H*(s.H+s.DQ)), take(s.H)
	}
	l.w3, l.b3 = take(s.H), take(1)
	l.n = off
	return l
}

// net is one trained or training network.
type net struct {
	shape netShape
	lay   layout
	w     []float64
}

func newNet(shape netShape, rng *rand.Rand) (*net, error) {
	if err := shape.validate(); err != nil {
		return nil, err
	}
	n := &net{shape: shape, lay: shape.layout()}
	n.w = make([]float64, n.lay.n)
	s, l := shape, n.lay
	// Xavier-uniform initialisation per weight matrix; biases start at zero.
	initM := func(off, rows, cols int) {
		a := math.Sqrt(6 / float64(rows+cols))
		for i := 0; i < rows*cols; i++ {
			n.w[off+i] = (2*rng.Float64() - 1) * a
		}
	}
	switch s.Arch {
	case ArchFFN:
		initM(l.w1, s.H, s.DQ+s.K*s.DT)
		initM(l.w2, s.H, s.H)
	case ArchRNN:
		initM(l.wx, s.H, s.DT)
		initM(l.wh, s.H, s.H)
		initM(l.w1, s.H, s.H+s.DQ)
	case ArchAttention:
		initM(l.wq, s.H, s.DQ)
		initM(l.wk, s.H, s.DT)
		initM(l.wv, s.H, s.DT)
		initM(l.w1, s.H, s.H+s.DQ)
	}
	initM(l.w3, 1, s.H)
	return n, nil
}

// scratch holds every intermediate of one forward pass (and what backward needs). Fixed
// arrays keep a scratch a single allocation that pools can recycle.
type scratch struct {
	xq  [maxDQ]float64
	tok [maxK][maxDT]float64
	// present[i] marks a real token; absent tokens are zero and masked.
	present [maxK]bool
	// FFN / head activations.
	in [maxDQ + maxK*maxDT]float64
	a1 [maxH]float64
	a2 [maxH]float64
	// RNN states h[0] = 0, h[i+1] after token i.
	h [maxK + 1][maxH]float64
	// Attention.
	q     [maxH]float64
	kk    [maxK][maxH]float64
	v     [maxK][maxH]float64
	alpha [maxK]float64
	// Backward temporaries.
	d1 [maxDQ + maxK*maxDT]float64
	d2 [maxH]float64
	d3 [maxH]float64
	dq [maxH]float64
}

// forward returns the network output for the query and tokens in sc.
func (n *net) forward(sc *scratch) float64 {
	s, l, w := n.shape, n.lay, n.w
	switch s.Arch {
	case ArchFFN:
		in := sc.in[:s.DQ+s.K*s.DT]
		copy(in, sc.xq[:s.DQ])
		for i := 0; i < s.K; i++ {
			copy(in[s.DQ+i*s.DT:], sc.tok[i][:s.DT])
		}
		nn.Dense(w[l.w1:], w[l.b1:], in, sc.a1[:s.H], true)
		nn.Dense(w[l.w2:], w[l.b2:], sc.a1[:s.H], sc.a2[:s.H], true)
		return nn.Dot(w[l.w3:l.w3+s.H], sc.a2[:s.H]) + w[l.b3]
	case ArchRNN:
		for j := 0; j < s.H; j++ {
			sc.h[0][j] = 0
		}
		for i := 0; i < s.K; i++ {
			hp, hn := sc.h[i][:s.H], sc.h[i+1][:s.H]
			if !sc.present[i] {
				copy(hn, hp)
				continue
			}
			t := sc.tok[i][:s.DT]
			for j := 0; j < s.H; j++ {
				z := w[l.bh+j] + nn.Dot(w[l.wx+j*s.DT:l.wx+(j+1)*s.DT], t) + nn.Dot(w[l.wh+j*s.H:l.wh+(j+1)*s.H], hp)
				hn[j] = math.Tanh(z)
			}
		}
		return n.head(sc, sc.h[s.K][:s.H])
	default: // attention
		nn.Dense(w[l.wq:], nil, sc.xq[:s.DQ], sc.q[:s.H], false)
		scale := 1 / math.Sqrt(float64(s.H))
		mx := math.Inf(-1)
		for i := 0; i < s.K; i++ {
			if !sc.present[i] {
				continue
			}
			t := sc.tok[i][:s.DT]
			nn.Dense(w[l.wk:], nil, t, sc.kk[i][:s.H], false)
			nn.Dense(w[l.wv:], nil, t, sc.v[i][:s.H], false)
			sc.alpha[i] = nn.Dot(sc.q[:s.H], sc.kk[i][:s.H]) * scale
			mx = math.Max(mx, sc.alpha[i])
		}
		var sum float64
		for i := 0; i < s.K; i++ {
			if !sc.present[i] {
				sc.alpha[i] = 0
				continue
			}
			sc.alpha[i] = math.Exp(sc.alpha[i] - mx)
			sum += sc.alpha[i]
		}
		c := sc.d3[:s.H] // context vector; d3 is free during forward
		for j := range c {
			c[j] = 0
		}
		if sum > 0 {
			for i := 0; i < s.K; i++ {
				if !sc.present[i] {
					continue
				}
				sc.alpha[i] /= sum
				for j := range c {
					c[j] += sc.alpha[i] * sc.v[i][j]
				}
			}
		}
		return n.head(sc, c)
	}
}

// head is the shared output MLP of the RNN and attention models on [summary, query].
func (n *net) head(sc *scratch, summary []float64) float64 {
	s, l, w := n.shape, n.lay, n.w
	in := sc.in[:s.H+s.DQ]
	copy(in, summary)
	copy(in[s.H:], sc.xq[:s.DQ])
	nn.Dense(w[l.w1:], w[l.b1:], in, sc.a1[:s.H], true)
	return nn.Dot(w[l.w3:l.w3+s.H], sc.a1[:s.H]) + w[l.b3]
}

// backward adds dL/dw for an output gradient dout to g; sc must hold the forward pass.
func (n *net) backward(sc *scratch, dout float64, g []float64) {
	s, l, w := n.shape, n.lay, n.w
	H := s.H
	g[l.b3] += dout
	switch s.Arch {
	case ArchFFN:
		nin := s.DQ + s.K*s.DT
		a1, a2 := sc.a1[:H], sc.a2[:H]
		dz2 := sc.d2[:H]
		for j := 0; j < H; j++ {
			g[l.w3+j] += dout * a2[j]
			dz2[j] = dout * w[l.w3+j] * (1 - a2[j]*a2[j])
		}
		dz1 := sc.d3[:H]
		for j := range dz1 {
			dz1[j] = 0
		}
		denseGrad(g, l.b2, l.w2, dz2, a1)
		denseBack(dz1, w, l.w2, H, dz2)
		for j := 0; j < H; j++ {
			dz1[j] *= 1 - a1[j]*a1[j]
		}
		denseGrad(g, l.b1, l.w1, dz1, sc.in[:nin])
	case ArchRNN:
		// The head's input was [h_K, xq].
		dh := sc.dq[:H]
		n.headBackward(sc, dout, g, dh)
		dz := sc.d2[:H]
		for i := s.K - 1; i >= 0; i-- {
			if !sc.present[i] {
				continue // h[i+1] = h[i]: the gradient passes through unchanged
			}
			hn, hp := sc.h[i+1][:H], sc.h[i][:H]
			t := sc.tok[i][:s.DT]
			for j := 0; j < H; j++ {
				dz[j] = dh[j] * (1 - hn[j]*hn[j])
			}
			for j := range dh {
				dh[j] = 0
			}
			for r := 0; r < H; r++ {
				g[l.bh+r] += dz[r]
				rx := l.wx + r*s.DT
				for c := 0; c < s.DT; c++ {
					g[rx+c] += dz[r] * t[c]
				}
				rh := l.wh + r*H
				for c := 0; c < H; c++ {
					g[rh+c] += dz[r] * hp[c]
					dh[c] += dz[r] * w[rh+c]
				}
			}
		}
	default: // attention
		dc := sc.dq[:H]
		n.headBackward(sc, dout, g, dc)
		scale := 1 / math.Sqrt(float64(H))
		// dalpha_i = dc . v_i; ds_i = alpha_i (dalpha_i - sum_j alpha_j dalpha_j).
		var da [maxK]float64
		var mean float64
		for i := 0; i < s.K; i++ {
			if sc.present[i] {
				da[i] = nn.Dot(dc, sc.v[i][:H])
				mean += sc.alpha[i] * da[i]
			}
		}
		dqv := sc.d2[:H]
		for j := range dqv {
			dqv[j] = 0
		}
		for i := 0; i < s.K; i++ {
			if !sc.present[i] {
				continue
			}
			t := sc.tok[i][:s.DT]
			ds := sc.alpha[i] * (da[i] - mean) * scale
			for r := 0; r < H; r++ {
				dv := sc.alpha[i] * dc[r]
				dk := ds * sc.q[r]
				dqv[r] += ds * sc.kk[i][r]
				rk, rv := l.wk+r*s.DT, l.wv+r*s.DT
				for c := 0; c < s.DT; c++ {
					g[rk+c] += dk * t[c]
					g[rv+c] += dv * t[c]
				}
			}
		}
		for r := 0; r < H; r++ {
			rq := l.wq + r*s.DQ
			for c := 0; c < s.DQ; c++ {
				g[rq+c] += dqv[r] * sc.xq[c]
			}
		}
	}
}

// headBackward back-propagates through the head and writes dL/dsummary into dsum.
func (n *net) headBackward(sc *scratch, dout float64, g, dsum []float64) {
	s, l, w := n.shape, n.lay, n.w
	H, nin := s.H, s.H+s.DQ
	a1 := sc.a1[:H]
	dz1 := sc.d3[:H]
	for j := 0; j < H; j++ {
		g[l.w3+j] += dout * a1[j]
		dz1[j] = dout * w[l.w3+j] * (1 - a1[j]*a1[j])
	}
	for j := range dsum {
		dsum[j] = 0
	}
	denseGrad(g, l.b1, l.w1, dz1, sc.in[:nin])
	denseBack(dsum, w, l.w1, nin, dz1)
}

// denseGrad adds a dense layer's parameter gradients to g: dz (the gradient at its outputs'
// pre-activations) to the biases at b, dz x in to the row-major weights at w (len(in) a row).
func denseGrad(g []float64, b, w int, dz, in []float64) {
	for r, d := range dz {
		g[b+r] += d
		row := w + r*len(in)
		for c, x := range in {
			g[row+c] += d * x
		}
	}
}

// denseBack adds to din the gradient at the first len(din) inputs of a dense layer whose
// row-major weights (rowLen a row) start at w[off]: the weights' transpose times dz.
func denseBack(din, w []float64, off, rowLen int, dz []float64) {
	for r, d := range dz {
		row := off + r*rowLen
		for c := range din {
			din[c] += d * w[row+c]
		}
	}
}
