package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// MLP is a fully connected network with tanh hidden layers and a linear output. Its parameters
// live in one flat slice (Params) so the optimiser, the checkpoint and gradient reductions treat
// them as one vector; W and B are views into it.
type MLP struct {
	// Sizes are the layer widths, input first, output last.
	Sizes  []int
	Params []float64
	// W[l] is the out x in weight matrix of layer l (row-major); B[l] its bias.
	W []blas64.General
	B [][]float64
}

// NewMLP builds a network with the given layer sizes and zero parameters.
func NewMLP(sizes ...int) (*MLP, error) {
	if len(sizes) < 2 {
		return nil, fmt.Errorf("mlp: need at least an input and an output size, got %v", sizes)
	}
	n := 0
	for i, s := range sizes {
		if s <= 0 {
			return nil, fmt.Errorf("mlp: layer %d has size %d, expected > 0", i, s)
		}
		if i > 0 {
			n += sizes[i-1]*s + s
		}
	}
	m := &MLP{Sizes: append([]int(nil), sizes...), Params: make([]float64, n)}
	m.bind()
	return m, nil
}

// bind points W and B at Params.
func (m *MLP) bind() {
	m.W = m.W[:0]
	m.B = m.B[:0]
	off := 0
	for l := 1; l < len(m.Sizes); l++ {
		in, out := m.Sizes[l-1], m.Sizes[l]
		m.W = append(m.W, blas64.General{Rows: out, Cols: in, Stride: in, Data: m.Params[off : off+in*out]})
		off += in * out
		m.B = append(m.B, m.Params[off:off+out])
		off += out
	}
}

// Init draws weights with Glorot-uniform scaling and zero biases; the last layer is scaled by
// outScale (small for a policy head, so the initial policy is close to uniform).
func (m *MLP) Init(rng *rand.Rand, outScale float64) {
	for l, w := range m.W {
		lim := math.Sqrt(6 / float64(w.Rows+w.Cols))
		if l == len(m.W)-1 {
			lim *= outScale
		}
		for i := range w.Data {
			w.Data[i] = (2*rng.Float64() - 1) * lim
		}
		for i := range m.B[l] {
			m.B[l][i] = 0
		}
	}
}

// Clone returns a deep copy.
func (m *MLP) Clone() *MLP {
	c := &MLP{Sizes: append([]int(nil), m.Sizes...), Params: append([]float64(nil), m.Params...)}
	c.bind()
	return c
}

// In and Out are the input and output widths.
func (m *MLP) In() int  { return m.Sizes[0] }
func (m *MLP) Out() int { return m.Sizes[len(m.Sizes)-1] }

// Workspace holds the activations of one forward pass over up to Cap rows, reused across calls
// so inference does not allocate.
type Workspace struct {
	Cap  int
	acts [][]float64 // acts[l]: Cap x Sizes[l]; acts[0] is the input copy
	dels [][]float64 // deltas for backprop, same shapes
}

// NewWorkspace allocates buffers for batches of up to rows inputs.
func (m *MLP) NewWorkspace(rows int) *Workspace {
	ws := &Workspace{Cap: rows}
	for _, s := range m.Sizes {
		ws.acts = append(ws.acts, make([]float64, rows*s))
		ws.dels = append(ws.dels, make([]float64, rows*s))
	}
	return ws
}

// Forward evaluates rows inputs (x is rows x In, row-major) and returns the rows x Out outputs,
// a view into the workspace valid until the next call.
func (m *MLP) Forward(ws *Workspace, x []float64, rows int) []float64 {
	if rows > ws.Cap {
		panic(fmt.Sprintf("mlp: %d rows exceed the workspace capacity %d", rows, ws.Cap))
	}
	in := m.Sizes[0]
	copy(ws.acts[0][:rows*in], x[:rows*in])
	for l, w := range m.W {
		a := blas64.General{Rows: rows, Cols: w.Cols, Stride: w.Cols, Data: ws.acts[l][:rows*w.Cols]}
		out := ws.acts[l+1][:rows*w.Rows]
		b := m.B[l]
		for r := 0; r < rows; r++ {
			copy(out[r*w.Rows:(r+1)*w.Rows], b)
		}
		c := blas64.General{Rows: rows, Cols: w.Rows, Stride: w.Rows, Data: out}
		blas64.Gemm(blas.NoTrans, blas.Trans, 1, a, w, 1, c)
		if l < len(m.W)-1 {
			for i, v := range out {
				out[i] = math.Tanh(v)
			}
		}
	}
	return ws.acts[len(m.Sizes)-1][:rows*m.Out()]
}

// Backward accumulates into grad (same layout as Params) the gradient of a loss whose
// derivative with respect to the outputs of the last Forward on ws is dOut (rows x Out).
// The workspace must still hold that forward pass.
func (m *MLP) Backward(ws *Workspace, dOut []float64, rows int, grad []float64) {
	L := len(m.W)
	copy(ws.dels[L][:rows*m.Out()], dOut[:rows*m.Out()])
	// Parameter offsets per layer, in the same order as bind.
	off := len(m.Params)
	for l := L - 1; l >= 0; l-- {
		w := m.W[l]
		off -= w.Rows*w.Cols + w.Rows
		gw := blas64.General{Rows: w.Rows, Cols: w.Cols, Stride: w.Cols, Data: grad[off : off+w.Rows*w.Cols]}
		gb := grad[off+w.Rows*w.Cols : off+w.Rows*w.Cols+w.Rows]
		d := blas64.General{Rows: rows, Cols: w.Rows, Stride: w.Rows, Data: ws.dels[l+1][:rows*w.Rows]}
		a := blas64.General{Rows: rows, Cols: w.Cols, Stride: w.Cols, Data: ws.acts[l][:rows*w.Cols]}
		// dW += d^T a ; db += column sums of d.
		blas64.Gemm(blas.Trans, blas.NoTrans, 1, d, a, 1, gw)
		for r := 0; r < rows; r++ {
			row := d.Data[r*w.Rows : (r+1)*w.Rows]
			for j, v := range row {
				gb[j] += v
			}
		}
		if l == 0 {
			break
		}
		// Delta of the previous layer: (d W) * tanh'(a), where a already holds tanh outputs.
		prev := blas64.General{Rows: rows, Cols: w.Cols, Stride: w.Cols, Data: ws.dels[l][:rows*w.Cols]}
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, d, w, 0, prev)
		for i, v := range a.Data {
			prev.Data[i] *= 1 - v*v
		}
	}
}
