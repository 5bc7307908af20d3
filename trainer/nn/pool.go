package nn

import "fmt"

// MaxPool2D takes the largest value of every Size×Size window of each
// channel of In-shaped images, windows Size apart (PyTorch's
// nn.MaxPool2d(Size)); rows and columns left over at the bottom and right
// are dropped. Backward routes each output gradient to the input that won
// its window (the first, on ties).
type MaxPool2D struct {
	noParams
	In   Shape
	Size int

	out    Matrix
	dx     Matrix
	argmax []int32 // for each output value, the winning input's index in its row
}

// NewMaxPool2D returns a size×size max pooling of in-shaped images.
func NewMaxPool2D(in Shape, size int) *MaxPool2D {
	p := &MaxPool2D{In: in, Size: size}
	p.OutShape() // validates
	return p
}

// OutShape is the shape of the images Forward produces: (H/Size)×(W/Size)×C.
func (p *MaxPool2D) OutShape() Shape {
	p.In.check("MaxPool2D")
	if p.Size <= 0 || p.Size > p.In.H || p.Size > p.In.W {
		panic(fmt.Sprintf("nn: MaxPool2D of %v with window %d", p.In, p.Size))
	}
	return Shape{H: p.In.H / p.Size, W: p.In.W / p.Size, C: p.In.C}
}

// Forward implements Layer.
func (p *MaxPool2D) Forward(x *Matrix) *Matrix {
	if x.Cols != p.In.Size() {
		panic(fmt.Sprintf("nn: %s got rows of %d values, want %d", p.Signature(), x.Cols, p.In.Size()))
	}
	os := p.OutShape()
	in, s, ch := p.In, p.Size, p.In.C
	p.out.Resize(x.Rows, os.Size())
	n := x.Rows * os.Size()
	if cap(p.argmax) < n {
		p.argmax = make([]int32, n)
	}
	p.argmax = p.argmax[:n]
	for b := 0; b < x.Rows; b++ {
		img, out, arg := x.Row(b), p.out.Row(b), p.argmax[b*os.Size():(b+1)*os.Size()]
		for oy := 0; oy < os.H; oy++ {
			for ox := 0; ox < os.W; ox++ {
				o := (oy*os.W + ox) * ch
				// The window's top-left pixel starts every channel's max.
				first := ((oy*s)*in.W + ox*s) * ch
				copy(out[o:o+ch], img[first:first+ch])
				for c := 0; c < ch; c++ {
					arg[o+c] = int32(first + c)
				}
				for ky := 0; ky < s; ky++ {
					for kx := 0; kx < s; kx++ {
						at := ((oy*s+ky)*in.W + ox*s + kx) * ch
						for c, v := range img[at : at+ch] {
							if v > out[o+c] {
								out[o+c], arg[o+c] = v, int32(at+c)
							}
						}
					}
				}
			}
		}
	}
	return &p.out
}

// Backward implements Layer.
func (p *MaxPool2D) Backward(dout *Matrix) *Matrix {
	if dout.Rows != p.out.Rows || dout.Cols != p.out.Cols {
		panic(fmt.Sprintf("nn: %s backward got %d×%d, forward produced %d×%d", p.Signature(), dout.Rows, dout.Cols, p.out.Rows, p.out.Cols))
	}
	p.dx.Resize(dout.Rows, p.In.Size())
	p.dx.Zero()
	for b := 0; b < dout.Rows; b++ {
		dx, arg := p.dx.Row(b), p.argmax[b*dout.Cols:(b+1)*dout.Cols]
		for i, g := range dout.Row(b) {
			dx[arg[i]] += g
		}
	}
	return &p.dx
}

// Signature implements Layer.
func (p *MaxPool2D) Signature() string { return fmt.Sprintf("MaxPool2D(%v,%d)", p.In, p.Size) }

// Flatten marks where images become feature vectors, as PyTorch's
// nn.Flatten does before a classifier's Linear layers. Rows already hold
// each image flattened (NHWC order), so it passes its input and gradient
// through unchanged; it checks their width and names the shape in the
// model's Signature.
type Flatten struct {
	noParams
	In Shape
}

// NewFlatten returns a Flatten of in-shaped images.
func NewFlatten(in Shape) *Flatten {
	in.check("Flatten")
	return &Flatten{In: in}
}

// Forward implements Layer.
func (f *Flatten) Forward(x *Matrix) *Matrix {
	f.check(x)
	return x
}

// Backward implements Layer.
func (f *Flatten) Backward(dout *Matrix) *Matrix {
	f.check(dout)
	return dout
}

func (f *Flatten) check(x *Matrix) {
	if x.Cols != f.In.Size() {
		panic(fmt.Sprintf("nn: %s got rows of %d values, want %d", f.Signature(), x.Cols, f.In.Size()))
	}
}

// Signature implements Layer.
func (f *Flatten) Signature() string { return fmt.Sprintf("Flatten(%v)", f.In) }
