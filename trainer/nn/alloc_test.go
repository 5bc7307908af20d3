package nn

import (
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// TestTrainingStepDoesNotAllocate runs warm training steps (forward, loss,
// backward, optimizer) and counts heap allocations. The shapes keep each
// product below gonum's parallel threshold; see Gonum.
func TestTrainingStepDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for name, newOpt := range optimizers() {
		t.Run(name, func(t *testing.T) {
			m := NewSequential(rng, NewLinear(20, 64), NewReLU(), NewLinear(64, 64), NewTanh(), NewLinear(64, 64), NewSigmoid(), NewLinear(64, 3))
			opt := newOpt(m)
			x := randomInput(rng, 32, 20, 0)
			labels := make([]int, 32)
			for i := range labels {
				labels[i] = i % 3
			}
			assertNoAllocs(t, stepper(m, opt, x, crossEntropyTo(labels)))
		})
	}
}

// stepper returns one training step (zero grads, forward, loss,
// BackwardParams, optimizer) on a fixed batch.
func stepper(m *Sequential, opt Optimizer, x *Matrix, loss LossFunc) func() {
	var g Matrix
	return func() {
		m.ZeroGrad()
		loss(m.Forward(x), &g)
		m.BackwardParams(&g)
		opt.Step()
	}
}

func crossEntropyTo(labels []int) LossFunc {
	return func(out, grad *Matrix) float64 { return SoftmaxCrossEntropy(out, labels, grad) }
}

func mseTo(target *Matrix) LossFunc {
	return func(out, grad *Matrix) float64 { return MSE(out, target, grad) }
}

// assertNoAllocs warms step up once, then requires it not to allocate.
func assertNoAllocs(t *testing.T, step func()) {
	t.Helper()
	step()
	must.Eq(t, 0.0, testing.AllocsPerRun(10, step))
}
