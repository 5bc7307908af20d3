package nn

import "math/rand/v2"

// Layer is one stage of a Sequential model with an explicit backward pass.
//
// A layer does not own its parameters: Sequential allocates one flat
// parameter buffer and one flat gradient buffer for the whole model and
// hands each layer its window of both through Bind. Forward caches whatever
// Backward needs; Backward must be called after the Forward it refers to and
// accumulates (adds) parameter gradients into the bound gradient window.
//
// The matrices Forward and Backward return are owned by the layer and stay
// valid until its next Forward or Backward call; callers must not keep them
// across steps or modify them.
type Layer interface {
	// NumParams is the number of float32 parameters the layer needs.
	NumParams() int
	// Bind gives the layer its parameter and gradient windows (each of
	// length NumParams) and the matmul backend to use.
	Bind(params, grads []float32, be Backend)
	// Init writes initial values into the bound parameter window.
	Init(rng *rand.Rand)
	// Forward computes the layer's output for a batch (one example per row).
	Forward(x *Matrix) *Matrix
	// Backward takes dLoss/dOutput and returns dLoss/dInput, adding the
	// parameter gradients into the bound gradient window.
	Backward(dout *Matrix) *Matrix
	// Signature describes the layer's kind and shape, e.g. "Linear(10,1)".
	// Checkpoints store it to refuse loading into a different architecture.
	Signature() string
}

// ParamBackwarder is implemented by layers that can compute their parameter
// gradients without dLoss/dInput. Sequential.BackwardParams uses it for the
// first layer, whose input gradient a training step never needs.
type ParamBackwarder interface {
	BackwardParams(dout *Matrix)
}
