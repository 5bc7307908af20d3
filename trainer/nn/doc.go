// Package nn is a small neural-network library for training functions: the
// Go counterpart of the parts of torch.nn and torch.optim a data-parallel
// worker needs.
//
// Everything is float32. A Sequential model keeps all its parameters in one
// flat buffer and all its gradients in another, laid out alike, so a
// data-parallel runtime broadcasts Params once at start and all-reduces
// Grads with one call per step. Layers have explicit backward passes; the
// matrix products go through a swappable Backend (gonum's BLAS by default).
// Forward, Backward and the optimizers' Step reuse their buffers and do not
// allocate once warm.
//
// A training step:
//
//	rng := rand.New(rand.NewPCG(1, 2))
//	model := nn.NewSequential(rng, nn.NewLinear(10, 32), nn.NewReLU(), nn.NewLinear(32, 1))
//	opt := nn.NewSGD(model.Params(), model.Grads(), nn.SGDConfig{LR: 0.05, Momentum: 0.9})
//	var dout nn.Matrix
//	model.ZeroGrad()
//	pred := model.Forward(x)
//	loss := nn.MSE(pred, y, &dout)
//	model.BackwardParams(&dout) // Backward also returns dLoss/dx
//	// data parallel: all-reduce model.Grads() and divide by the world size here
//	opt.Step()
//
// Besides Linear and the element-wise activations there are image layers
// for small CNNs: Conv2D (im2col and one Backend product per batch),
// MaxPool2D and Flatten, on images stored one per row, height-major with a
// pixel's channels together (see Shape):
//
//	c1 := nn.NewConv2D(nn.Shape{H: 28, W: 28, C: 1}, 8, 5, 2)
//	p1 := nn.NewMaxPool2D(c1.OutShape(), 2)
//	cnn := nn.NewSequential(rng, c1, nn.NewReLU(), p1, nn.NewFlatten(p1.OutShape()),
//		nn.NewLinear(p1.OutShape().Size(), 10))
//
// The optimizers' updates run as one fused loop over the flat buffers,
// vectorised in C where cgo is available on amd64.
//
// SaveState and LoadState write and read a model's parameters with its
// optimizer's state in a small checksummed binary format.
package nn
