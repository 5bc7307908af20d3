package nn

import (
	"math"
	"math/rand/v2"
	"strings"
)

// Sequential chains layers. Its parameters and gradients live in one flat
// buffer each, laid out layer after layer in order (for a Linear: its Out×In
// weights, then its Out biases, as PyTorch's parameters() lists them), so a
// data-parallel runtime can broadcast Params and all-reduce Grads in one call.
// A Sequential is not safe for concurrent use.
type Sequential struct {
	layers  []Layer
	params  []float32
	grads   []float32
	backend Backend
}

// NewSequential builds a model from layers, allocates its flat buffers,
// binds each layer to its window and initialises parameters from rng, in
// layer order, so the same seed gives the same model on every worker. A nil
// rng leaves all parameters zero. The model uses the Gonum backend until
// SetBackend says otherwise.
func NewSequential(rng *rand.Rand, layers ...Layer) *Sequential {
	n := 0
	for _, l := range layers {
		n += l.NumParams()
	}
	m := &Sequential{
		layers:  layers,
		params:  make([]float32, n),
		grads:   make([]float32, n),
		backend: Gonum{},
	}
	m.bind()
	if rng != nil {
		for _, l := range m.layers {
			l.Init(rng)
		}
	}
	return m
}

func (m *Sequential) bind() {
	off := 0
	for _, l := range m.layers {
		end := off + l.NumParams()
		l.Bind(m.params[off:end:end], m.grads[off:end:end], m.backend)
		off = end
	}
}

// SetBackend switches the matmul backend of every layer of this model.
func (m *Sequential) SetBackend(be Backend) {
	m.backend = be
	m.bind()
}

// Backend returns the model's matmul backend.
func (m *Sequential) Backend() Backend { return m.backend }

// Layers returns the model's layers in order.
func (m *Sequential) Layers() []Layer { return m.layers }

// NumParams is the length of Params and Grads.
func (m *Sequential) NumParams() int { return len(m.params) }

// Params returns the flat parameter buffer. It aliases the layers'
// parameters: writing into it (a broadcast, a checkpoint restore) changes
// the model.
func (m *Sequential) Params() []float32 { return m.params }

// Grads returns the flat gradient buffer, laid out like Params. Backward
// adds into it; an all-reduce may overwrite it in place before an
// optimizer step.
func (m *Sequential) Grads() []float32 { return m.grads }

// ZeroGrad sets every gradient to zero.
func (m *Sequential) ZeroGrad() { clear(m.grads) }

// ScaleGrads multiplies every gradient by s, e.g. by 1/world size after a
// summing all-reduce.
func (m *Sequential) ScaleGrads(s float32) {
	for i := range m.grads {
		m.grads[i] *= s
	}
}

// ClipGradNorm rescales the gradients so their global L2 norm is at most
// maxNorm, as torch.nn.utils.clip_grad_norm_ does, and returns the norm
// before clipping. Run it after the all-reduce so every worker clips alike.
func (m *Sequential) ClipGradNorm(maxNorm float64) float64 {
	var sq float64
	for _, g := range m.grads {
		sq += float64(g) * float64(g)
	}
	norm := math.Sqrt(sq)
	if norm > maxNorm {
		m.ScaleGrads(float32(maxNorm / (norm + 1e-6)))
	}
	return norm
}

// Forward runs the batch x (one example per row) through every layer and
// returns the output, which the last layer owns: it is valid until the next
// Forward. x must stay unchanged until Backward has run.
func (m *Sequential) Forward(x *Matrix) *Matrix {
	for _, l := range m.layers {
		x = l.Forward(x)
	}
	return x
}

// Backward propagates dLoss/dOutput back through the layers of the last
// Forward, adds the parameter gradients into Grads and returns
// dLoss/dInput (owned by the first layer).
func (m *Sequential) Backward(dout *Matrix) *Matrix {
	for i := len(m.layers) - 1; i >= 0; i-- {
		dout = m.layers[i].Backward(dout)
	}
	return dout
}

// BackwardParams is Backward for a training step: it adds the parameter
// gradients into Grads but lets the first layer skip dLoss/dInput when it
// implements ParamBackwarder (a Linear first layer saves a third of its
// backward work).
func (m *Sequential) BackwardParams(dout *Matrix) {
	if len(m.layers) == 0 {
		return
	}
	for i := len(m.layers) - 1; i > 0; i-- {
		dout = m.layers[i].Backward(dout)
	}
	if pb, ok := m.layers[0].(ParamBackwarder); ok {
		pb.BackwardParams(dout)
		return
	}
	m.layers[0].Backward(dout)
}

// Signature describes the architecture, e.g. "Linear(2,8)|Tanh|Linear(8,1)".
// Two models with equal signatures have the same parameter layout.
func (m *Sequential) Signature() string {
	var sb strings.Builder
	for i, l := range m.layers {
		if i > 0 {
			sb.WriteByte('|')
		}
		sb.WriteString(l.Signature())
	}
	return sb.String()
}
