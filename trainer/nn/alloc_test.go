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
			var g Matrix
			step := func() {
				m.ZeroGrad()
				SoftmaxCrossEntropy(m.Forward(x), labels, &g)
				m.Backward(&g)
				opt.Step()
			}
			step()
			must.Eq(t, 0.0, testing.AllocsPerRun(20, step))
		})
	}
}
