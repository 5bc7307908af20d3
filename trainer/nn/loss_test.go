package nn

import (
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

func TestLossValues(t *testing.T) {
	var g Matrix
	// MSE: mean of (1, 4, 0, 9) = 3.5; gradient 2·diff/4.
	pred := FromRows([][]float32{{1, 2}, {3, 4}})
	target := FromRows([][]float32{{0, 4}, {3, 1}})
	must.Eq(t, 3.5, MSE(pred, target, &g))
	must.Eq(t, []float32{0.5, -1, 0, 1.5}, g.Data)

	// Cross-entropy of equal logits is ln(classes).
	must.InDelta(t, math.Log(3), SoftmaxCrossEntropy(NewMatrix(2, 3), []int{0, 2}, &g), 1e-12)
	must.InDelta(t, float32(1.0/3-1)/2, g.At(0, 0), 1e-7)
	must.InDelta(t, float32(1.0/3)/2, g.At(0, 1), 1e-7)

	// Huge logits stay finite: loss = 2000 for the wrong class, 0 for the right one.
	big := FromRows([][]float32{{1000, -1000}, {1000, -1000}})
	l := SoftmaxCrossEntropy(big, []int{1, 0}, &g)
	must.InDelta(t, 1000.0, l, 1e-9)
	must.Eq(t, []float32{0.5, -0.5, 0, 0}, g.Data)

	must.Eq(t, 0.5, Accuracy(big, []int{1, 0}))
	must.Eq(t, 0, Argmax([]float32{3, 3, 1}))
	must.Eq(t, -1, Argmax(nil))
}
