package data

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/nomad-train/nomad-train/trainer/nn"
)

// Dataset is an in-memory data set: Len() examples of Features inputs
// each, with regression targets (Targets values per example), class
// labels, or both. All slices are row-major and flat.
type Dataset struct {
	// X holds Len()·Features inputs.
	X        []float32
	Features int
	// Y holds Len()·Targets regression targets; nil when there are none.
	Y       []float32
	Targets int
	// Labels holds one class label per example; nil when there are none.
	Labels []int
}

// ErrDatasetShape is wrapped by Validate's errors.
var ErrDatasetShape = errors.New("inconsistent dataset shape")

// Len is the number of examples.
func (d *Dataset) Len() int {
	if d.Features == 0 {
		return 0
	}
	return len(d.X) / d.Features
}

// Validate reports buffers whose lengths disagree with Features, Targets
// and each other.
func (d *Dataset) Validate() error {
	if d.Features < 1 || len(d.X)%d.Features != 0 {
		return fmt.Errorf("%w: %d inputs with %d features", ErrDatasetShape, len(d.X), d.Features)
	}
	n := d.Len()
	if d.Y != nil && (d.Targets < 1 || len(d.Y) != n*d.Targets) {
		return fmt.Errorf("%w: %d targets for %d examples of %d targets", ErrDatasetShape, len(d.Y), n, d.Targets)
	}
	if d.Labels != nil && len(d.Labels) != n {
		return fmt.Errorf("%w: %d labels for %d examples", ErrDatasetShape, len(d.Labels), n)
	}
	return nil
}

// Gather copies the examples at indices into xOut (resized to
// len(indices)×Features) and, when yOut is not nil, their targets into
// yOut (len(indices)×Targets). With matrices reused from batch to batch it
// does not allocate.
func (d *Dataset) Gather(indices []int, xOut, yOut *nn.Matrix) {
	gatherRows(d.X, d.Features, indices, xOut)
	if yOut != nil {
		gatherRows(d.Y, d.Targets, indices, yOut)
	}
}

// GatherLabels copies the examples at indices into xOut and their labels
// into labels, reusing its capacity, and returns the labels slice.
func (d *Dataset) GatherLabels(indices []int, xOut *nn.Matrix, labels []int) []int {
	gatherRows(d.X, d.Features, indices, xOut)
	labels = labels[:0]
	for _, i := range indices {
		labels = append(labels, d.Labels[i])
	}
	return labels
}

func gatherRows(src []float32, width int, indices []int, out *nn.Matrix) {
	out.Resize(len(indices), width)
	for r, i := range indices {
		copy(out.Data[r*width:(r+1)*width], src[i*width:(i+1)*width])
	}
}

// LinearRegression generates n examples of y = x·w + b + noise with x and
// w drawn from N(0,1), b from N(0,1) and noise from N(0, noise²). It returns
// the data set and the true w and b.
func LinearRegression(rng *rand.Rand, n, features int, noise float64) (*Dataset, []float32, float32) {
	w := make([]float32, features)
	for j := range w {
		w[j] = float32(rng.NormFloat64())
	}
	b := float32(rng.NormFloat64())
	d := &Dataset{X: make([]float32, n*features), Features: features, Y: make([]float32, n), Targets: 1}
	for i := 0; i < n; i++ {
		y := float64(b)
		for j := 0; j < features; j++ {
			v := float32(rng.NormFloat64())
			d.X[i*features+j] = v
			y += float64(v) * float64(w[j])
		}
		d.Y[i] = float32(y + noise*rng.NormFloat64())
	}
	return d, w, b
}

// Blobs generates n labelled examples in classes Gaussian clusters (unit
// spread) whose centres are drawn from N(0, separation²) per feature.
func Blobs(rng *rand.Rand, n, features, classes int, separation float64) *Dataset {
	centres := make([]float64, classes*features)
	for i := range centres {
		centres[i] = separation * rng.NormFloat64()
	}
	d := &Dataset{X: make([]float32, n*features), Features: features, Labels: make([]int, n)}
	for i := 0; i < n; i++ {
		c := rng.IntN(classes)
		d.Labels[i] = c
		for j := 0; j < features; j++ {
			d.X[i*features+j] = float32(centres[c*features+j] + rng.NormFloat64())
		}
	}
	return d
}
