package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// gradTol is the largest relative error a correct float32 backward pass
// may show against central differences with Eps 1e-2 on these shapes (the
// worst seen is about 2e-4); the planted bugs below show errors of order 1.
const gradTol = 2e-3

// probeLoss is Σ out⊙R for a fixed random R, so dLoss/dout = R exercises
// every output element with a different weight.
func probeLoss(rng *rand.Rand, rows, cols int) LossFunc {
	r := NewMatrix(rows, cols)
	for i := range r.Data {
		r.Data[i] = float32(rng.NormFloat64())
	}
	return func(out, grad *Matrix) float64 {
		grad.Resize(out.Rows, out.Cols)
		copy(grad.Data, r.Data)
		var s float64
		for i, v := range out.Data {
			s += float64(v) * float64(r.Data[i])
		}
		return s
	}
}

// randomInput fills a rows×cols matrix from N(0,1), keeping every value at
// least minAbs away from zero (ReLU's kink).
func randomInput(rng *rand.Rand, rows, cols int, minAbs float64) *Matrix {
	x := NewMatrix(rows, cols)
	for i := range x.Data {
		v := rng.NormFloat64()
		for v > -minAbs && v < minAbs {
			v = rng.NormFloat64()
		}
		x.Data[i] = float32(v)
	}
	return x
}

func checkLayer(t *testing.T, rng *rand.Rand, layer Layer, in, out int, minAbs float64) GradCheckResult {
	t.Helper()
	m := NewSequential(rng, layer)
	x := randomInput(rng, 5, in, minAbs)
	return GradCheck(m, x, probeLoss(rng, 5, out), GradCheckOptions{})
}

func assertGradOK(t *testing.T, r GradCheckResult) {
	t.Helper()
	t.Logf("max relative error: input %.2g, params %.2g", r.MaxInputErr, r.MaxParamErr)
	must.Less(t, gradTol, r.MaxInputErr, must.Sprintf("input grad %d: analytic %v numeric %v", r.WorstInput, r.AnalyticInput, r.NumericInput))
	must.Less(t, gradTol, r.MaxParamErr, must.Sprintf("param grad %d: analytic %v numeric %v", r.WorstParam, r.AnalyticParam, r.NumericParam))
}

func TestGradCheckLayers(t *testing.T) {
	cases := []struct {
		name    string
		layer   func() Layer
		in, out int
		minAbs  float64
		params  bool
	}{
		{"Linear-default", func() Layer { return NewLinear(4, 3) }, 4, 3, 0, true},
		{"Linear-kaiming", func() Layer { return &Linear{In: 3, Out: 6, Scheme: InitKaiming} }, 3, 6, 0, true},
		{"Linear-glorot-1x1", func() Layer { return &Linear{In: 1, Out: 1, Scheme: InitGlorot} }, 1, 1, 0, true},
		{"ReLU", func() Layer { return NewReLU() }, 4, 4, 0.05, false},
		{"Tanh", func() Layer { return NewTanh() }, 4, 4, 0, false},
		{"Sigmoid", func() Layer { return NewSigmoid() }, 4, 4, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := checkLayer(t, rand.New(rand.NewPCG(7, 8)), tc.layer(), tc.in, tc.out, tc.minAbs)
			assertGradOK(t, r)
			must.Eq(t, tc.params, r.WorstParam >= 0)
		})
	}
}

func TestGradCheckModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	m := NewSequential(rng, NewLinear(3, 5), NewTanh(), NewLinear(5, 4), NewSigmoid(), NewLinear(4, 2))
	x := randomInput(rng, 6, 3, 0)
	labels := []int{0, 1, 1, 0, 1, 0}
	assertGradOK(t, GradCheck(m, x, crossEntropyTo(labels), GradCheckOptions{}))
}

func TestGradCheckLosses(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	target := randomInput(rng, 4, 3, 0)
	labels := []int{2, 0, 1, 2}
	cases := []struct {
		name  string
		scale float32
		loss  LossFunc
	}{
		{"MSE", 1, mseTo(target)},
		{"CrossEntropy", 1, crossEntropyTo(labels)},
		// Logits around ±1000 would overflow a naive softmax.
		{"CrossEntropy-large-logits", 1000, crossEntropyTo(labels)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x := randomInput(rng, 4, 3, 0)
			for i := range x.Data {
				x.Data[i] *= tc.scale
			}
			// A model without layers passes its input through, so the check
			// is of the loss alone.
			r := GradCheck(NewSequential(nil), x, tc.loss, GradCheckOptions{Eps: 1e-2 * tc.scale})
			assertGradOK(t, r)
			must.Eq(t, -1, r.WorstParam)
		})
	}
}

// scaleLayer is y = a⊙x with one parameter per column, and planted bugs.
type scaleLayer struct {
	cols             int
	flipInput        bool // sign error in dLoss/dx
	forgetParamAccum bool // overwrite instead of using x in dLoss/da
	a, da            []float32
	x                *Matrix
	out, dx          Matrix
}

func (s *scaleLayer) NumParams() int { return s.cols }
func (s *scaleLayer) Bind(p, g []float32, _ Backend) {
	s.a, s.da = p, g
}
func (s *scaleLayer) Init(rng *rand.Rand) {
	for i := range s.a {
		s.a[i] = 0.5 + rng.Float32()
	}
}
func (s *scaleLayer) Forward(x *Matrix) *Matrix {
	s.x = x
	s.out.Resize(x.Rows, x.Cols)
	for i, v := range x.Data {
		s.out.Data[i] = v * s.a[i%s.cols]
	}
	return &s.out
}
func (s *scaleLayer) Backward(dout *Matrix) *Matrix {
	s.dx.Resize(dout.Rows, dout.Cols)
	for i, g := range dout.Data {
		j := i % s.cols
		s.dx.Data[i] = g * s.a[j]
		if s.flipInput {
			s.dx.Data[i] = -s.dx.Data[i]
		}
		if s.forgetParamAccum {
			s.da[j] = g
		} else {
			s.da[j] += g * s.x.Data[i]
		}
	}
	return &s.dx
}
func (s *scaleLayer) Signature() string { return fmt.Sprintf("scale(%d)", s.cols) }

// TestGradCheckCatchesPlantedBugs shows the checker is not vacuous: the
// correct scale layer passes, each planted error fails on the gradient it
// breaks.
func TestGradCheckCatchesPlantedBugs(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	ok := checkLayer(t, rng, &scaleLayer{cols: 3}, 3, 3, 0)
	assertGradOK(t, ok)

	flip := checkLayer(t, rng, &scaleLayer{cols: 3, flipInput: true}, 3, 3, 0)
	must.Greater(t, 1, flip.MaxInputErr)
	must.Less(t, gradTol, flip.MaxParamErr)

	forget := checkLayer(t, rng, &scaleLayer{cols: 3, forgetParamAccum: true}, 3, 3, 0)
	must.Less(t, gradTol, forget.MaxInputErr)
	must.Greater(t, 0.5, forget.MaxParamErr)

	// NaN is a failure, not a pass.
	nan := GradCheck(NewSequential(nil), NewMatrix(1, 1), func(out, grad *Matrix) float64 {
		grad.Resize(out.Rows, out.Cols)
		return math.NaN()
	}, GradCheckOptions{})
	must.True(t, math.IsInf(nan.MaxInputErr, 1))

	// A Linear layer that runs on a backend with a sign error in its
	// products fails too.
	bad := NewSequential(rng, NewLinear(3, 2))
	bad.SetBackend(negatingBackend{})
	r := GradCheck(bad, randomInput(rng, 4, 3, 0), probeLoss(rng, 4, 2), GradCheckOptions{})
	must.Greater(t, 1, r.MaxInputErr)
}

// negatingBackend computes the right forward product but negates the
// backward ones (those that accumulate, beta=1 with a transposed A, or
// read dout untransposed against W untransposed).
type negatingBackend struct{}

func (negatingBackend) Sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !tB {
		alpha = -alpha
	}
	Gonum{}.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
