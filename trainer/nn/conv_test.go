package nn

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// naiveConv is the direct float64 convolution Conv2D.Forward must equal.
func naiveConv(c *Conv2D, x *Matrix) *Matrix {
	os := c.OutShape()
	out := NewMatrix(x.Rows, os.Size())
	in, s := c.In, c.stride()
	for b := 0; b < x.Rows; b++ {
		for oy := 0; oy < os.H; oy++ {
			for ox := 0; ox < os.W; ox++ {
				for oc := 0; oc < c.Out; oc++ {
					sum := float64(c.b[oc])
					for ky := 0; ky < c.K; ky++ {
						for kx := 0; kx < c.K; kx++ {
							iy, ix := oy*s+ky-c.Pad, ox*s+kx-c.Pad
							if iy < 0 || iy >= in.H || ix < 0 || ix >= in.W {
								continue
							}
							for ch := 0; ch < in.C; ch++ {
								w := c.w[oc*c.patch()+(ky*c.K+kx)*in.C+ch]
								sum += float64(w) * float64(x.At(b, (iy*in.W+ix)*in.C+ch))
							}
						}
					}
					out.Set(b, (oy*os.W+ox)*c.Out+oc, float32(sum))
				}
			}
		}
	}
	return out
}

func convCases() []*Conv2D {
	return []*Conv2D{
		NewConv2D(Shape{5, 4, 2}, 3, 3, 1),
		NewConv2D(Shape{4, 4, 1}, 2, 2, 0),
		{In: Shape{6, 5, 2}, Out: 3, K: 3, Stride: 2, Pad: 1},
		{In: Shape{3, 3, 3}, Out: 1, K: 3, Pad: 2, Scheme: InitKaiming},
	}
}

// Conv2D's im2col product equals the direct convolution, with padding,
// strides and several channels.
func TestConv2DMatchesDirectConvolution(t *testing.T) {
	for _, c := range convCases() {
		t.Run(c.Signature(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			NewSequential(rng, c)
			x := randomInput(rng, 3, c.In.Size(), 0)
			got, want := c.Forward(x), naiveConv(c, x)
			must.Eq(t, want.Cols, got.Cols)
			for i := range want.Data {
				must.InDelta(t, want.Data[i], got.Data[i], 1e-5)
			}
		})
	}
	must.Eq(t, Shape{3, 3, 3}, convCases()[2].OutShape())
}

// distinctInput is a rows×n matrix of well-separated values (a shuffled
// ladder 0.05 apart), so no pooling window has a near-tie that the
// central-difference step could flip.
func distinctInput(rng *rand.Rand, rows, n int) *Matrix {
	x := NewMatrix(rows, n)
	for i, j := range rng.Perm(len(x.Data)) {
		x.Data[i] = 0.05*float32(j) - 0.025*float32(len(x.Data))
	}
	return x
}

func TestGradCheckImageLayers(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	type tc struct {
		name  string
		model func() *Sequential
		in    int
		eps   float32 // GradCheck's step, 0 for its default
	}
	var cases []tc
	for _, c := range convCases() {
		cases = append(cases, tc{c.Signature(), func() *Sequential { return NewSequential(rng, c) }, c.In.Size(), 0})
	}
	cases = append(cases,
		tc{"MaxPool2D-even", func() *Sequential { return NewSequential(nil, NewMaxPool2D(Shape{4, 6, 2}, 2)) }, 48, 0},
		tc{"MaxPool2D-leftover", func() *Sequential { return NewSequential(nil, NewMaxPool2D(Shape{5, 5, 3}, 2)) }, 75, 0},
		tc{"Flatten", func() *Sequential { return NewSequential(nil, NewFlatten(Shape{2, 2, 3})) }, 12, 0},
		// Perturbing a filter moves every pixel it makes, so pooling windows
		// downstream may change winner inside a step of 1e-2; a step of
		// 2e-3 keeps the check off those kinks, and its float32 rounding
		// (about 3e-5 absolute) is kept below gradTol by a larger floor.
		tc{"small-CNN", func() *Sequential {
			c1 := NewConv2D(Shape{6, 6, 1}, 2, 3, 1)
			p1 := NewMaxPool2D(c1.OutShape(), 2)
			c2 := NewConv2D(p1.OutShape(), 3, 2, 0)
			return NewSequential(rng, c1, p1, c2, NewTanh(), NewFlatten(c2.OutShape()), NewLinear(c2.OutShape().Size(), 4))
		}, 36, 2e-3},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.model()
			x := distinctInput(rng, 3, tc.in)
			out := m.Forward(x)
			opts := GradCheckOptions{Eps: tc.eps}
			if tc.eps != 0 {
				opts.Floor = 0.05
			}
			r := GradCheck(m, x, probeLoss(rng, 3, out.Cols), opts)
			assertGradOK(t, r)
			must.Eq(t, m.NumParams() > 0, r.WorstParam >= 0)
		})
	}
}

// Pooling picks each window's largest value per channel and drops the
// leftover row and column; its gradient goes to the winners only.
func TestMaxPool2DValues(t *testing.T) {
	// One channel, 3×3: windows of size 2 cover the top-left 2×2 only.
	p := NewMaxPool2D(Shape{3, 3, 1}, 2)
	x := FromRows([][]float32{{1, 5, 9, 3, 2, 9, 9, 9, 9}})
	must.Eq(t, []float32{5}, p.Forward(x).Data)
	dx := p.Backward(FromRows([][]float32{{2}}))
	must.Eq(t, []float32{0, 2, 0, 0, 0, 0, 0, 0, 0}, dx.Data)
	// Two channels interleaved: channel 0 is 1,2,3,4 and channel 1 is 8,7,6,5.
	p = NewMaxPool2D(Shape{2, 2, 2}, 2)
	must.Eq(t, []float32{4, 8}, p.Forward(FromRows([][]float32{{1, 8, 2, 7, 3, 6, 4, 5}})).Data)
	must.Eq(t, []float32{0, 1, 0, 0, 0, 0, 1, 0}, p.Backward(FromRows([][]float32{{1, 1}})).Data)
}

// The image layers refuse inputs of the wrong width and impossible shapes.
func TestImageLayerShapesChecked(t *testing.T) {
	for name, f := range map[string]func(){
		"conv-width":    func() { NewConv2D(Shape{4, 4, 1}, 2, 3, 1).Forward(NewMatrix(1, 15)) },
		"conv-too-big":  func() { NewConv2D(Shape{2, 2, 1}, 2, 5, 1) },
		"conv-no-out":   func() { NewConv2D(Shape{4, 4, 1}, 0, 3, 1) },
		"pool-width":    func() { NewMaxPool2D(Shape{4, 4, 1}, 2).Forward(NewMatrix(1, 15)) },
		"pool-too-big":  func() { NewMaxPool2D(Shape{2, 2, 1}, 3) },
		"flatten-width": func() { NewFlatten(Shape{2, 2, 1}).Forward(NewMatrix(1, 5)) },
		"flatten-empty": func() { NewFlatten(Shape{0, 2, 1}) },
		"conv-backward": func() { NewConv2D(Shape{4, 4, 1}, 2, 3, 1).Backward(NewMatrix(1, 32)) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() { must.NotNil(t, recover()) }()
			f()
		})
	}
}

// A CNN's parameters and optimizer state survive SaveState and LoadState,
// and its signature keeps them out of a CNN of another shape.
func TestCNNCheckpointRoundTrip(t *testing.T) {
	build := func(rng *rand.Rand, ch int) *Sequential {
		c := NewConv2D(Shape{8, 8, 1}, ch, 3, 1)
		p := NewMaxPool2D(c.OutShape(), 2)
		return NewSequential(rng, c, NewReLU(), p, NewFlatten(p.OutShape()), NewLinear(p.OutShape().Size(), 3))
	}
	rng := rand.New(rand.NewPCG(5, 5))
	m := build(rng, 4)
	opt := NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 0.01})
	x := randomInput(rng, 4, 64, 0)
	step := stepper(m, opt, x, crossEntropyTo([]int{0, 1, 2, 1}))
	step()
	step()
	var buf bytes.Buffer
	must.NoError(t, SaveState(&buf, m, opt))

	m2 := build(nil, 4)
	opt2 := NewAdam(m2.Params(), m2.Grads(), AdamConfig{LR: 0.01})
	must.NoError(t, LoadState(bytes.NewReader(buf.Bytes()), m2, opt2))
	must.Eq(t, m.Params(), m2.Params())
	must.Eq(t, opt.State(), opt2.State())
	must.Eq(t, m.Forward(x).Data, m2.Forward(x).Data)

	err := LoadState(bytes.NewReader(buf.Bytes()), build(nil, 5), nil)
	must.ErrorIs(t, err, ErrMismatch)
	must.StrContains(t, fmt.Sprint(err), "Conv2D(8x8x1,4,k3,s1,p1)")
}

// A warm CNN training step does not allocate (with products below gonum's
// parallel threshold, as TestTrainingStepDoesNotAllocate explains).
func TestCNNStepDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	c := NewConv2D(Shape{8, 8, 2}, 4, 3, 1)
	p := NewMaxPool2D(c.OutShape(), 2)
	m := NewSequential(rng, c, NewReLU(), p, NewFlatten(p.OutShape()), NewLinear(p.OutShape().Size(), 3))
	opt := NewSGD(m.Params(), m.Grads(), SGDConfig{LR: 0.1, Momentum: 0.9})
	assertNoAllocs(t, stepper(m, opt, randomInput(rng, 2, 128, 0), crossEntropyTo([]int{0, 2})))
	if math.IsNaN(float64(m.Params()[0])) {
		t.Fatal("NaN parameters")
	}
}
