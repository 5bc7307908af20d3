package nn

import (
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

// TestOptimizerSteps compares each optimizer with updates computed by hand
// (in float64) for two steps with gradients 0.5 then -1 on the parameter 1.
func TestOptimizerSteps(t *testing.T) {
	adam := func(lr, b1, b2, eps, wd float64) []float64 {
		p, m, v := 1.0, 0.0, 0.0
		var out []float64
		for step, g := range []float64{0.5, -1} {
			g += wd * p
			m = b1*m + (1-b1)*g
			v = b2*v + (1-b2)*g*g
			n := float64(step + 1)
			p -= lr * (m / (1 - math.Pow(b1, n))) / (math.Sqrt(v/(1-math.Pow(b2, n))) + eps)
			out = append(out, p)
		}
		return out
	}
	cases := []struct {
		name string
		opt  func(p, g []float32) Optimizer
		want []float64
	}{
		// p1 = 1 - 0.1·0.5 = 0.95; p2 = 0.95 + 0.1 = 1.05.
		{"sgd", func(p, g []float32) Optimizer { return NewSGD(p, g, SGDConfig{LR: 0.1}) }, []float64{0.95, 1.05}},
		// v1 = 0.5, p1 = 0.95; v2 = 0.45 - 1 = -0.55, p2 = 1.005.
		{"sgd-momentum", func(p, g []float32) Optimizer {
			return NewSGD(p, g, SGDConfig{LR: 0.1, Momentum: 0.9})
		}, []float64{0.95, 1.005}},
		// g1 = 0.5+0.1 = 0.6, v1 = 0.6, p1 = 0.94; g2 = -1+0.094 = -0.906,
		// v2 = 0.54-0.906 = -0.366, p2 = 0.9766.
		{"sgd-momentum-wd", func(p, g []float32) Optimizer {
			return NewSGD(p, g, SGDConfig{LR: 0.1, Momentum: 0.9, WeightDecay: 0.1})
		}, []float64{0.94, 0.9766}},
		// g1 = 0.5, v1 = 0.5, p1 = 1 - 0.1·(0.5+0.45) = 0.905; g2 = -1,
		// v2 = -0.55, p2 = 0.905 - 0.1·(-1 - 0.495) = 1.0545.
		{"sgd-nesterov", func(p, g []float32) Optimizer {
			return NewSGD(p, g, SGDConfig{LR: 0.1, Momentum: 0.9, Nesterov: true})
		}, []float64{0.905, 1.0545}},
		// The first Adam step moves by lr·sign(g) almost exactly.
		{"adam", func(p, g []float32) Optimizer { return NewAdam(p, g, AdamConfig{LR: 0.01}) },
			adam(0.01, 0.9, 0.999, 1e-8, 0)},
		{"adam-custom-wd", func(p, g []float32) Optimizer {
			return NewAdam(p, g, AdamConfig{LR: 0.05, Beta1: 0.5, Beta2: 0.9, Eps: 1e-3, WeightDecay: 0.2})
		}, adam(0.05, 0.5, 0.9, 1e-3, 0.2)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, g := []float32{1}, []float32{0.5}
			opt := tc.opt(p, g)
			opt.Step()
			must.InDelta(t, tc.want[0], float64(p[0]), 1e-6)
			g[0] = -1
			opt.Step()
			must.InDelta(t, tc.want[1], float64(p[0]), 1e-6)
			must.Eq(t, 2, opt.Steps())
		})
	}
	must.InDelta(t, 0.99, adam(0.01, 0.9, 0.999, 1e-8, 0)[0], 1e-7)
}

func TestOptimizerStateAndLR(t *testing.T) {
	p, g := make([]float32, 3), make([]float32, 3)
	must.SliceEmpty(t, NewSGD(p, g, SGDConfig{LR: 1}).State())
	must.SliceLen(t, 3, NewSGD(p, g, SGDConfig{LR: 1, Momentum: 0.5}).State())
	a := NewAdam(p, g, AdamConfig{LR: 1})
	must.SliceLen(t, 6, a.State())
	a.SetLR(0.5)
	must.Eq(t, 0.5, a.LR())
	a.SetSteps(7)
	must.Eq(t, 7, a.Steps())
	must.Eq(t, "adam", a.Kind())
}
