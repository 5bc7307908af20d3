package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Images travel between layers as rows of a Matrix, one example per row,
// each row an H×W×C image stored height-major with the channels of a pixel
// together (NHWC): element (y, x, c) of example b is Data[b*Cols +
// (y*W+x)*C + c]. A one-channel image (MNIST) is simply its pixels in
// reading order.

// Shape is the height, width and channel count of the images in a row.
type Shape struct{ H, W, C int }

// Size is the number of floats of one image, H·W·C.
func (s Shape) Size() int { return s.H * s.W * s.C }

func (s Shape) String() string { return fmt.Sprintf("%dx%dx%d", s.H, s.W, s.C) }

func (s Shape) check(layer string) {
	if s.H <= 0 || s.W <= 0 || s.C <= 0 {
		panic(fmt.Sprintf("nn: %s needs a positive input shape, got %v", layer, s))
	}
}

// Conv2D is a 2-D convolution (cross-correlation, as PyTorch's nn.Conv2d
// computes) of In-shaped images with Out square K×K filters, moving Stride
// pixels at a time over the input padded with Pad zeros on every side.
// It lowers each batch to one matrix product with im2col: every output
// pixel's receptive field becomes a row of K·K·In.C values, and the product
// with the filters goes through the model's Backend, so convolutions run at
// the backend's GEMM speed.
//
// Its parameters are the Out×(K·K·In.C) filter matrix, row oc holding
// filter oc's weights in (ky, kx, c) order, followed by Out biases.
type Conv2D struct {
	In     Shape
	Out    int // output channels
	K      int // filter side
	Stride int // 0 means 1
	Pad    int
	// Scheme selects the initial distribution as for Linear, with fan-in
	// K·K·In.C.
	Scheme InitScheme

	w, b   []float32
	dw, db []float32
	be     Backend

	batch int    // rows of the last Forward
	cols  Matrix // im2col of the last input: (batch·OH·OW) × (K·K·C)
	out   Matrix
	dcols Matrix
	dx    Matrix
}

// NewConv2D returns a stride-1 convolution of in-shaped images with out
// k×k filters and pad zeros of padding (pad = (k-1)/2 keeps the size).
func NewConv2D(in Shape, out, k, pad int) *Conv2D {
	c := &Conv2D{In: in, Out: out, K: k, Pad: pad}
	c.OutShape() // validates
	return c
}

func (c *Conv2D) stride() int { return max(c.Stride, 1) }

// OutShape is the shape of the images Forward produces:
// ((H+2·Pad-K)/Stride+1) × ((W+2·Pad-K)/Stride+1) × Out.
func (c *Conv2D) OutShape() Shape {
	c.In.check("Conv2D")
	if c.Out <= 0 || c.K <= 0 || c.Pad < 0 || c.Stride < 0 {
		panic(fmt.Sprintf("nn: Conv2D of %v with %d %dx%d filters, pad %d, stride %d is not a convolution", c.In, c.Out, c.K, c.K, c.Pad, c.Stride))
	}
	oh := (c.In.H+2*c.Pad-c.K)/c.stride() + 1
	ow := (c.In.W+2*c.Pad-c.K)/c.stride() + 1
	if c.In.H+2*c.Pad < c.K || c.In.W+2*c.Pad < c.K {
		panic(fmt.Sprintf("nn: Conv2D %dx%d filter is larger than the padded %v input", c.K, c.K, c.In))
	}
	return Shape{H: oh, W: ow, C: c.Out}
}

// patch is the length of one im2col row, K·K·In.C.
func (c *Conv2D) patch() int { return c.K * c.K * c.In.C }

// NumParams implements Layer.
func (c *Conv2D) NumParams() int { return c.Out*c.patch() + c.Out }

// Bind implements Layer.
func (c *Conv2D) Bind(params, grads []float32, be Backend) {
	nw, n := c.Out*c.patch(), c.NumParams()
	c.w, c.b = params[:nw:nw], params[nw:n:n]
	c.dw, c.db = grads[:nw:nw], grads[nw:n:n]
	c.be = be
}

// Init implements Layer.
func (c *Conv2D) Init(rng *rand.Rand) {
	fanIn := float64(c.patch())
	var wb, bb float64
	switch c.Scheme {
	case InitKaiming:
		wb = math.Sqrt(6 / fanIn)
	case InitGlorot:
		wb = math.Sqrt(6 / (fanIn + float64(c.Out*c.K*c.K)))
	default:
		wb = 1 / math.Sqrt(fanIn)
		bb = wb
	}
	uniform(rng, c.w, wb)
	uniform(rng, c.b, bb)
}

// Forward implements Layer.
func (c *Conv2D) Forward(x *Matrix) *Matrix {
	if x.Cols != c.In.Size() {
		panic(fmt.Sprintf("nn: %s got rows of %d values, want %d", c.Signature(), x.Cols, c.In.Size()))
	}
	os := c.OutShape()
	pix := os.H * os.W
	c.batch = x.Rows
	c.im2col(x, os)
	// The product's rows are output pixels and its columns channels, which
	// is the NHWC layout of the output rows, so out is the product itself.
	c.out.Resize(x.Rows, os.Size())
	fillRows(c.out.Data, c.b)
	if x.Rows > 0 {
		c.be.Sgemm(false, true, x.Rows*pix, c.Out, c.patch(), 1, c.cols.Data, c.patch(), c.w, c.patch(), 1, c.out.Data, c.Out)
	}
	return &c.out
}

// im2col fills c.cols with one row per output pixel of every example.
func (c *Conv2D) im2col(x *Matrix, os Shape) {
	c.cols.Resize(x.Rows*os.H*os.W, c.patch())
	c.patches(x.Data, c.cols.Data, os, false)
}

// col2im adds every row of dcols back into the input pixels it was copied
// from, writing dLoss/dInput into c.dx.
func (c *Conv2D) col2im(os Shape) {
	c.dx.Resize(c.batch, c.In.Size())
	c.dx.Zero()
	c.patches(c.dx.Data, c.dcols.Data, os, true)
}

// patches walks every output pixel's receptive field in the images of
// imgs (c.batch of them) alongside its row of cols: it copies the pixels
// into cols (zeros for padding), or with scatter adds cols back into them.
func (c *Conv2D) patches(imgs, cols []float32, os Shape, scatter bool) {
	in, k, s, pad, ch := c.In, c.K, c.stride(), c.Pad, c.In.C
	for b := 0; b < c.batch; b++ {
		img := imgs[b*in.Size() : (b+1)*in.Size()]
		for oy := 0; oy < os.H; oy++ {
			for ox := 0; ox < os.W; ox++ {
				for ky := 0; ky < k; ky++ {
					iy := oy*s + ky - pad
					row := cols[:k*ch]
					cols = cols[k*ch:]
					if iy < 0 || iy >= in.H {
						if !scatter {
							clear(row)
						}
						continue
					}
					// The filter row's pixels inside the image, kx in [lo, hi),
					// are contiguous in both the image and the patch row.
					ix0 := ox*s - pad
					lo, hi := max(0, -ix0), min(k, in.W-ix0)
					if lo >= hi {
						if !scatter {
							clear(row)
						}
						continue
					}
					seg := row[lo*ch : hi*ch]
					px := img[(iy*in.W+ix0+lo)*ch : (iy*in.W+ix0+hi)*ch]
					if scatter {
						for j, v := range seg {
							px[j] += v
						}
						continue
					}
					clear(row[:lo*ch])
					copy(seg, px)
					clear(row[hi*ch:])
				}
			}
		}
	}
}

// Backward implements Layer.
func (c *Conv2D) Backward(dout *Matrix) *Matrix {
	c.BackwardParams(dout)
	os := c.OutShape()
	rows := c.batch * os.H * os.W
	c.dcols.Resize(rows, c.patch())
	if rows > 0 {
		// dcols = dY·W, with dY the (batch·OH·OW)×Out view of dout.
		c.be.Sgemm(false, false, rows, c.patch(), c.Out, 1, dout.Data, c.Out, c.w, c.patch(), 0, c.dcols.Data, c.patch())
	}
	c.col2im(os)
	return &c.dx
}

// BackwardParams implements ParamBackwarder: the filter and bias gradients
// without dLoss/dInput, which skips a product and the col2im scatter.
func (c *Conv2D) BackwardParams(dout *Matrix) {
	os := c.OutShape()
	if dout.Rows != c.batch || dout.Cols != os.Size() || c.cols.Rows != c.batch*os.H*os.W {
		panic(fmt.Sprintf("nn: %s backward shape mismatch or no forward", c.Signature()))
	}
	rows := c.batch * os.H * os.W
	if rows == 0 {
		return
	}
	// dW += dYᵀ·cols, db += column sums of dY.
	c.be.Sgemm(true, false, c.Out, c.patch(), rows, 1, dout.Data, c.Out, c.cols.Data, c.patch(), 1, c.dw, c.patch())
	addColumnSums(c.db, dout.Data)
}

// Signature implements Layer.
func (c *Conv2D) Signature() string {
	return fmt.Sprintf("Conv2D(%v,%d,k%d,s%d,p%d)", c.In, c.Out, c.K, c.stride(), c.Pad)
}

// addColumnSums adds the column sums of the row-major matrix data, whose
// rows are len(sums) long, into sums.
func addColumnSums(sums, data []float32) {
	n := len(sums)
	for len(data) >= n {
		row := data[:n]
		for j, v := range row {
			sums[j] += v
		}
		data = data[n:]
	}
}

// fillRows copies row into every len(row)-long row of data, as the start of
// a product that adds to a bias.
func fillRows(data, row []float32) {
	for len(data) >= len(row) && len(row) > 0 {
		copy(data, row)
		data = data[len(row):]
	}
}
