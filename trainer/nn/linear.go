package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// InitScheme selects how a Linear layer's parameters are drawn.
type InitScheme int

const (
	// InitDefault draws weights and biases from U(-1/√in, 1/√in), the
	// distribution of PyTorch's nn.Linear default.
	InitDefault InitScheme = iota
	// InitKaiming draws weights from U(-√(6/in), √(6/in)) (He uniform, for
	// ReLU networks) and sets biases to zero.
	InitKaiming
	// InitGlorot draws weights from U(-√(6/(in+out)), √(6/(in+out)))
	// (Xavier uniform, for tanh and sigmoid networks) and sets biases to zero.
	InitGlorot
)

// Linear is a fully connected layer y = x·Wᵀ + b with W of shape Out×In
// (PyTorch's layout) followed by b of length Out in the parameter window.
type Linear struct {
	In, Out int
	// Scheme selects the initial distribution; the zero value is InitDefault.
	Scheme InitScheme

	w, b   []float32 // parameter views
	dw, db []float32 // gradient views
	be     Backend

	x   *Matrix // input of the last Forward (not owned)
	out Matrix
	dx  Matrix
}

// NewLinear returns a Linear layer from in features to out features with the
// default initialisation. A literal &Linear{In: in, Out: out, Scheme: s}
// works as well.
func NewLinear(in, out int) *Linear {
	if in <= 0 || out <= 0 {
		panic(fmt.Sprintf("nn: Linear(%d,%d) needs positive sizes", in, out))
	}
	return &Linear{In: in, Out: out}
}

// NumParams implements Layer.
func (l *Linear) NumParams() int { return l.Out*l.In + l.Out }

// Bind implements Layer.
func (l *Linear) Bind(params, grads []float32, be Backend) {
	nw := l.Out * l.In
	l.w, l.b = params[:nw:nw], params[nw:l.NumParams():l.NumParams()]
	l.dw, l.db = grads[:nw:nw], grads[nw:l.NumParams():l.NumParams()]
	l.be = be
}

// Weight returns the Out×In weight window of the model's parameter buffer.
func (l *Linear) Weight() []float32 { return l.w }

// Bias returns the bias window of the model's parameter buffer.
func (l *Linear) Bias() []float32 { return l.b }

// Init implements Layer.
func (l *Linear) Init(rng *rand.Rand) {
	var wb, bb float64
	switch l.Scheme {
	case InitKaiming:
		wb = math.Sqrt(6 / float64(l.In))
	case InitGlorot:
		wb = math.Sqrt(6 / float64(l.In+l.Out))
	default:
		wb = 1 / math.Sqrt(float64(l.In))
		bb = wb
	}
	uniform(rng, l.w, wb)
	uniform(rng, l.b, bb)
}

func uniform(rng *rand.Rand, dst []float32, bound float64) {
	for i := range dst {
		dst[i] = float32((2*rng.Float64() - 1) * bound)
	}
}

// Forward implements Layer.
func (l *Linear) Forward(x *Matrix) *Matrix {
	if x.Cols != l.In {
		panic(fmt.Sprintf("nn: %s got input with %d columns", l.Signature(), x.Cols))
	}
	l.x = x
	l.out.Resize(x.Rows, l.Out)
	fillRows(l.out.Data, l.b)
	if x.Rows > 0 {
		l.be.Sgemm(false, true, x.Rows, l.Out, l.In, 1, x.Data, l.In, l.w, l.In, 1, l.out.Data, l.Out)
	}
	return &l.out
}

// Backward implements Layer.
func (l *Linear) Backward(dout *Matrix) *Matrix {
	x := l.x
	l.BackwardParams(dout)
	l.dx.Resize(x.Rows, l.In)
	if x.Rows > 0 {
		// dx = dout·W.
		l.be.Sgemm(false, false, x.Rows, l.In, l.Out, 1, dout.Data, l.Out, l.w, l.In, 0, l.dx.Data, l.In)
	}
	return &l.dx
}

// BackwardParams implements ParamBackwarder: the parameter gradients of
// Backward without dLoss/dInput, one product instead of two.
func (l *Linear) BackwardParams(dout *Matrix) {
	x := l.x
	if x == nil || dout.Rows != x.Rows || dout.Cols != l.Out {
		panic(fmt.Sprintf("nn: %s backward shape mismatch or no forward", l.Signature()))
	}
	if x.Rows == 0 {
		return
	}
	// dW += doutᵀ·x, db += column sums of dout.
	l.be.Sgemm(true, false, l.Out, l.In, x.Rows, 1, dout.Data, l.Out, x.Data, l.In, 1, l.dw, l.In)
	addColumnSums(l.db, dout.Data)
}

// Signature implements Layer.
func (l *Linear) Signature() string { return fmt.Sprintf("Linear(%d,%d)", l.In, l.Out) }
