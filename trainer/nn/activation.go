package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// noParams is the parameter half of Layer for layers without parameters.
type noParams struct{}

// NumParams implements Layer: the layer has no parameters.
func (noParams) NumParams() int { return 0 }

// Bind implements Layer; there is nothing to bind.
func (noParams) Bind(_, _ []float32, _ Backend) {}

// Init implements Layer; there is nothing to initialise.
func (noParams) Init(*rand.Rand) {}

// activation holds what the element-wise layers share: no parameters, an
// output buffer and an input-gradient buffer.
type activation struct {
	noParams
	out Matrix
	dx  Matrix
}

// forward applies f element-wise into the output buffer.
func (a *activation) forward(x *Matrix, f func(float32) float32) *Matrix {
	a.out.Resize(x.Rows, x.Cols)
	for i, v := range x.Data {
		a.out.Data[i] = f(v)
	}
	return &a.out
}

// backward writes dx[i] = dout[i] * d(y[i]) where d is the derivative
// expressed through the cached output y.
func (a *activation) backward(name string, dout *Matrix, d func(y float32) float32) *Matrix {
	a.checkBackward(name, dout)
	a.dx.Resize(dout.Rows, dout.Cols)
	for i, g := range dout.Data {
		a.dx.Data[i] = g * d(a.out.Data[i])
	}
	return &a.dx
}

// checkBackward panics unless dout has the shape of the last output.
func (a *activation) checkBackward(name string, dout *Matrix) {
	if dout.Rows != a.out.Rows || dout.Cols != a.out.Cols {
		panic(fmt.Sprintf("nn: %s backward got %d×%d, forward produced %d×%d", name, dout.Rows, dout.Cols, a.out.Rows, a.out.Cols))
	}
}

// ReLU is max(0, x) element-wise. Its derivative at exactly 0 is taken as 0.
type ReLU struct{ activation }

// NewReLU returns a ReLU layer.
func NewReLU() *ReLU { return &ReLU{} }

// Forward implements Layer.
func (r *ReLU) Forward(x *Matrix) *Matrix {
	// A kernel of its own: through forward's function value it costs
	// several times more, and ReLU runs on every hidden activation.
	r.out.Resize(x.Rows, x.Cols)
	reluForward(r.out.Data, x.Data)
	return &r.out
}

// Backward implements Layer.
func (r *ReLU) Backward(dout *Matrix) *Matrix {
	r.checkBackward("ReLU", dout)
	r.dx.Resize(dout.Rows, dout.Cols)
	reluBackward(r.dx.Data, r.out.Data, dout.Data)
	return &r.dx
}

// Signature implements Layer.
func (*ReLU) Signature() string { return "ReLU" }

// Tanh is the hyperbolic tangent element-wise.
type Tanh struct{ activation }

// NewTanh returns a Tanh layer.
func NewTanh() *Tanh { return &Tanh{} }

// Forward implements Layer.
func (t *Tanh) Forward(x *Matrix) *Matrix { return t.forward(x, tanh) }

// Backward implements Layer.
func (t *Tanh) Backward(dout *Matrix) *Matrix { return t.backward("Tanh", dout, tanhGrad) }

// Signature implements Layer.
func (*Tanh) Signature() string { return "Tanh" }

func tanh(v float32) float32     { return float32(math.Tanh(float64(v))) }
func tanhGrad(y float32) float32 { return 1 - y*y }

// Sigmoid is 1/(1+e^-x) element-wise.
type Sigmoid struct{ activation }

// NewSigmoid returns a Sigmoid layer.
func NewSigmoid() *Sigmoid { return &Sigmoid{} }

// Forward implements Layer.
func (s *Sigmoid) Forward(x *Matrix) *Matrix { return s.forward(x, sigmoid) }

// Backward implements Layer.
func (s *Sigmoid) Backward(dout *Matrix) *Matrix { return s.backward("Sigmoid", dout, sigmoidGrad) }

// Signature implements Layer.
func (*Sigmoid) Signature() string { return "Sigmoid" }

func sigmoid(v float32) float32 {
	// Both branches keep exp's argument non-positive so nothing overflows.
	if v >= 0 {
		return float32(1 / (1 + math.Exp(-float64(v))))
	}
	e := math.Exp(float64(v))
	return float32(e / (1 + e))
}

func sigmoidGrad(y float32) float32 { return y * (1 - y) }
