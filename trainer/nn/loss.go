package nn

import (
	"fmt"
	"math"
)

// MSE returns the mean squared error over all elements of pred against
// target, mean((pred-target)²) as PyTorch's MSELoss computes it, and writes
// dLoss/dpred into grad (resized to pred's shape). The sum is accumulated in
// float64.
func MSE(pred, target, grad *Matrix) float64 {
	if pred.Rows != target.Rows || pred.Cols != target.Cols {
		panic(fmt.Sprintf("nn: MSE of %d×%d prediction against %d×%d target", pred.Rows, pred.Cols, target.Rows, target.Cols))
	}
	grad.Resize(pred.Rows, pred.Cols)
	n := len(pred.Data)
	if n == 0 {
		return 0
	}
	scale := 2 / float32(n)
	var sum float64
	for i, p := range pred.Data {
		d := p - target.Data[i]
		sum += float64(d) * float64(d)
		grad.Data[i] = scale * d
	}
	return sum / float64(n)
}

// SoftmaxCrossEntropy returns the mean over the batch of the cross-entropy
// between softmax(logits row) and the integer class labels (PyTorch's
// CrossEntropyLoss), and writes dLoss/dlogits into grad (resized to logits'
// shape). It subtracts each row's maximum before exponentiating, so large
// logits do not overflow. A label outside [0, logits.Cols) panics.
func SoftmaxCrossEntropy(logits *Matrix, labels []int, grad *Matrix) float64 {
	if len(labels) != logits.Rows {
		panic(fmt.Sprintf("nn: cross-entropy of %d rows against %d labels", logits.Rows, len(labels)))
	}
	grad.Resize(logits.Rows, logits.Cols)
	if logits.Rows == 0 {
		return 0
	}
	invB := 1 / float64(logits.Rows)
	var total float64
	for i, y := range labels {
		if y < 0 || y >= logits.Cols {
			panic(fmt.Sprintf("nn: label %d of row %d is outside [0,%d)", y, i, logits.Cols))
		}
		row := logits.Row(i)
		g := grad.Row(i)
		mx := row[0]
		for _, v := range row[1:] {
			mx = max(mx, v)
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v - mx))
		}
		logSum := math.Log(sum)
		total += logSum - float64(row[y]-mx)
		for j, v := range row {
			g[j] = float32(math.Exp(float64(v-mx)-logSum) * invB)
		}
		g[y] -= float32(invB)
	}
	return total * invB
}

// Accuracy is the fraction of rows whose largest logit (first on ties) is at
// the row's label.
func Accuracy(logits *Matrix, labels []int) float64 {
	if len(labels) != logits.Rows {
		panic(fmt.Sprintf("nn: accuracy of %d rows against %d labels", logits.Rows, len(labels)))
	}
	if logits.Rows == 0 {
		return 0
	}
	correct := 0
	for i, y := range labels {
		if Argmax(logits.Row(i)) == y {
			correct++
		}
	}
	return float64(correct) / float64(logits.Rows)
}

// Argmax returns the index of the largest element of v (the first on ties),
// or -1 for an empty v.
func Argmax(v []float32) int {
	best := -1
	for j, x := range v {
		if best < 0 || x > v[best] {
			best = j
		}
	}
	return best
}
