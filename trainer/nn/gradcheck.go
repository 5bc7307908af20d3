package nn

import "math"

// LossFunc maps a model output to a scalar loss (accumulated in float64) and
// writes dLoss/dout into grad. MSE and SoftmaxCrossEntropy fit it through a
// closure over their targets.
type LossFunc func(out, grad *Matrix) float64

// GradCheckOptions tunes GradCheck. Zero fields take the defaults.
type GradCheckOptions struct {
	// Eps is the central-difference step (default 1e-2, a float32-friendly
	// step: smaller ones drown in rounding).
	Eps float32
	// Floor is the smallest denominator of the relative error (default
	// 1e-2), so gradients near zero are compared absolutely.
	Floor float64
}

// GradCheckResult reports the largest relative error between the analytic
// gradient from Backward and the central-difference estimate, over the
// inputs and over the parameters, with the index where each occurred (-1
// when there was nothing to compare).
type GradCheckResult struct {
	MaxInputErr, MaxParamErr float64
	WorstInput, WorstParam   int
	// AnalyticInput and NumericInput are the two gradients at WorstInput;
	// AnalyticParam and NumericParam those at WorstParam.
	AnalyticInput, NumericInput float64
	AnalyticParam, NumericParam float64
}

// GradCheck runs m forward and backward on x once, then estimates
// dLoss/dx and dLoss/dparams by central differences (two forward passes per
// element) and returns the worst disagreement. It perturbs x and the model's
// parameters in place and restores them exactly; it overwrites Grads. It is
// meant for tests of layers and losses, on small shapes. Inputs near a
// non-differentiable point (ReLU at 0) give spurious errors; keep them at
// least Eps away.
func GradCheck(m *Sequential, x *Matrix, loss LossFunc, opts GradCheckOptions) GradCheckResult {
	if opts.Eps == 0 {
		opts.Eps = 1e-2
	}
	if opts.Floor == 0 {
		opts.Floor = 1e-2
	}
	var dout, scratch Matrix
	m.ZeroGrad()
	loss(m.Forward(x), &dout)
	dx := append([]float32(nil), m.Backward(&dout).Data...)
	dp := append([]float32(nil), m.Grads()...)

	f := func() float64 { return loss(m.Forward(x), &scratch) }
	var r GradCheckResult
	r.WorstInput, r.MaxInputErr, r.AnalyticInput, r.NumericInput = compareNumeric(x.Data, dx, f, opts)
	r.WorstParam, r.MaxParamErr, r.AnalyticParam, r.NumericParam = compareNumeric(m.Params(), dp, f, opts)
	return r
}

// compareNumeric perturbs each vals[i] by ±eps, estimates df/dvals[i] and
// returns the worst relative error against analytic[i].
func compareNumeric(vals, analytic []float32, f func() float64, o GradCheckOptions) (worst int, maxErr, a, n float64) {
	worst = -1
	for i, v := range vals {
		hi, lo := v+o.Eps, v-o.Eps
		vals[i] = hi
		fh := f()
		vals[i] = lo
		fl := f()
		vals[i] = v
		num := (fh - fl) / (float64(hi) - float64(lo))
		an := float64(analytic[i])
		e := math.Abs(an-num) / math.Max(o.Floor, math.Max(math.Abs(an), math.Abs(num)))
		if math.IsNaN(e) {
			// A NaN anywhere is a failure, never a silent pass.
			e = math.Inf(1)
		}
		if worst < 0 || e > maxErr {
			worst, maxErr, a, n = i, e, an, num
		}
	}
	return worst, maxErr, a, n
}
