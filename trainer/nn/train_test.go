package nn

import (
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

func xorData() (*Matrix, *Matrix, []int) {
	x := FromRows([][]float32{{0, 0}, {0, 1}, {1, 0}, {1, 1}})
	y := FromRows([][]float32{{0}, {1}, {1}, {0}})
	return x, y, []int{0, 1, 1, 0}
}

func TestLearnsXOR(t *testing.T) {
	cases := []struct {
		name  string
		act   func() Layer
		opt   func(m *Sequential) Optimizer
		steps int
	}{
		{"tanh-sgd-momentum", func() Layer { return NewTanh() }, func(m *Sequential) Optimizer {
			return NewSGD(m.Params(), m.Grads(), SGDConfig{LR: 0.1, Momentum: 0.9})
		}, 500},
		{"relu-adam", func() Layer { return NewReLU() }, func(m *Sequential) Optimizer {
			return NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 0.02})
		}, 500},
		{"sigmoid-adam", func() Layer { return NewSigmoid() }, func(m *Sequential) Optimizer {
			return NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 0.05})
		}, 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x, _, labels := xorData()
			m := NewSequential(rand.New(rand.NewPCG(1, 2)), NewLinear(2, 16), tc.act(), NewLinear(16, 2))
			opt := tc.opt(m)
			var dout Matrix
			first := 0.0
			var loss float64
			for i := 0; i < tc.steps; i++ {
				m.ZeroGrad()
				loss = SoftmaxCrossEntropy(m.Forward(x), labels, &dout)
				if i == 0 {
					first = loss
				}
				m.Backward(&dout)
				opt.Step()
			}
			must.Less(t, 0.05, loss, must.Sprintf("loss went from %v to %v", first, loss))
			must.Eq(t, 1.0, Accuracy(m.Forward(x), labels))
		})
	}
}

func TestLearnsLinearRegression(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, d = 256, 5
	w := []float32{1, -2, 0.5, 3, -1}
	x, y := NewMatrix(n, d), NewMatrix(n, 1)
	for i := 0; i < n; i++ {
		s := float32(0.25)
		for j := 0; j < d; j++ {
			v := float32(rng.NormFloat64())
			x.Set(i, j, v)
			s += w[j] * v
		}
		y.Set(i, 0, s)
	}
	m := NewSequential(rng, NewLinear(d, 1))
	opt := NewSGD(m.Params(), m.Grads(), SGDConfig{LR: 0.1})
	var dout Matrix
	for i := 0; i < 200; i++ {
		m.ZeroGrad()
		MSE(m.Forward(x), y, &dout)
		m.Backward(&dout)
		opt.Step()
	}
	lin := m.Layers()[0].(*Linear)
	for j := range w {
		must.Between(t, w[j]-1e-3, lin.Weight()[j], w[j]+1e-3)
	}
	must.Between(t, 0.25-1e-3, lin.Bias()[0], 0.25+1e-3)
}

func TestScaleAndClipGrads(t *testing.T) {
	m := NewSequential(nil, NewLinear(1, 2))
	copy(m.Grads(), []float32{3, 0, 4, 0})
	m.ScaleGrads(0.5)
	must.Eq(t, []float32{1.5, 0, 2, 0}, m.Grads())
	must.InDelta(t, 2.5, m.ClipGradNorm(10), 1e-9)
	must.Eq(t, []float32{1.5, 0, 2, 0}, m.Grads())
	must.InDelta(t, 2.5, m.ClipGradNorm(1), 1e-9)
	must.InDelta(t, 0.6, m.Grads()[0], 1e-6)
	must.InDelta(t, 0.8, m.Grads()[2], 1e-6)
}

func TestBackwardParamsMatchesBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := randomInput(rng, 4, 3, 0)
	labels := []int{0, 1, 1, 0}
	for name, first := range map[string]func() Layer{
		"linear-first": func() Layer { return NewLinear(3, 4) },
		"tanh-first":   func() Layer { return NewTanh() },
	} {
		t.Run(name, func(t *testing.T) {
			in := 3
			if _, ok := first().(*Linear); ok {
				in = 4
			}
			m := NewSequential(rand.New(rand.NewPCG(1, 1)), first(), NewLinear(in, 2))
			var g Matrix
			m.ZeroGrad()
			SoftmaxCrossEntropy(m.Forward(x), labels, &g)
			m.Backward(&g)
			want := append([]float32(nil), m.Grads()...)
			m.ZeroGrad()
			SoftmaxCrossEntropy(m.Forward(x), labels, &g)
			m.BackwardParams(&g)
			must.Eq(t, want, m.Grads())
		})
	}
	NewSequential(nil).BackwardParams(NewMatrix(1, 1)) // no layers: nothing to do
}

func TestShapeMistakesPanicClearly(t *testing.T) {
	m := NewSequential(nil, NewLinear(3, 2))
	must.Panic(t, func() { m.Forward(NewMatrix(1, 4)) })
	must.Panic(t, func() { m.Backward(NewMatrix(1, 2)) }) // no forward yet
	m.Forward(NewMatrix(2, 3))
	must.Panic(t, func() { m.Backward(NewMatrix(3, 2)) })
	must.Panic(t, func() { NewReLU().Backward(NewMatrix(1, 1)) })
	must.Panic(t, func() { MSE(NewMatrix(1, 2), NewMatrix(2, 1), &Matrix{}) })
	must.Panic(t, func() { SoftmaxCrossEntropy(NewMatrix(1, 2), []int{2}, &Matrix{}) })
	must.Panic(t, func() { NewLinear(0, 1) })
	must.Panic(t, func() { NewSGD(make([]float32, 2), make([]float32, 3), SGDConfig{}) })
}
