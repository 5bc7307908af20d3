package nn_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"

	"github.com/nomad-train/nomad-train/trainer/nn"
)

// A classifier learns XOR; its state is saved and restored into a fresh
// model, as a worker does across a restart.
func Example() {
	x := nn.FromRows([][]float32{{0, 0}, {0, 1}, {1, 0}, {1, 1}})
	labels := []int{0, 1, 1, 0}

	model := nn.NewSequential(rand.New(rand.NewPCG(1, 2)), nn.NewLinear(2, 16), nn.NewTanh(), nn.NewLinear(16, 2))
	opt := nn.NewAdam(model.Params(), model.Grads(), nn.AdamConfig{LR: 0.05})
	var dout nn.Matrix
	for step := 0; step < 300; step++ {
		model.ZeroGrad()
		nn.SoftmaxCrossEntropy(model.Forward(x), labels, &dout)
		model.BackwardParams(&dout)
		// A data-parallel worker all-reduces model.Grads() here.
		opt.Step()
	}
	fmt.Println("accuracy:", nn.Accuracy(model.Forward(x), labels))

	var ckpt bytes.Buffer
	if err := nn.SaveState(&ckpt, model, opt); err != nil {
		panic(err)
	}
	restored := nn.NewSequential(nil, nn.NewLinear(2, 16), nn.NewTanh(), nn.NewLinear(16, 2))
	ropt := nn.NewAdam(restored.Params(), restored.Grads(), nn.AdamConfig{LR: 0.05})
	if err := nn.LoadState(&ckpt, restored, ropt); err != nil {
		panic(err)
	}
	fmt.Println("restored at step", ropt.Steps(), "accuracy:", nn.Accuracy(restored.Forward(x), labels))

	wrong := nn.NewSequential(nil, nn.NewLinear(2, 8), nn.NewTanh(), nn.NewLinear(8, 2))
	var again bytes.Buffer
	_ = nn.SaveState(&again, model, nil)
	fmt.Println(nn.LoadState(&again, wrong, nil))
	// Output:
	// accuracy: 1
	// restored at step 300 accuracy: 1
	// load nn state: nn state does not match model: saved from "Linear(2,16)|Tanh|Linear(16,2)", loading into "Linear(2,8)|Tanh|Linear(8,2)"
}

// A small CNN for 28×28 grey images: the image layers say their output
// shapes, so each layer is built from the one before it.
func ExampleConv2D() {
	c1 := nn.NewConv2D(nn.Shape{H: 28, W: 28, C: 1}, 8, 5, 2)
	p1 := nn.NewMaxPool2D(c1.OutShape(), 2)
	c2 := nn.NewConv2D(p1.OutShape(), 16, 5, 2)
	p2 := nn.NewMaxPool2D(c2.OutShape(), 2)
	model := nn.NewSequential(rand.New(rand.NewPCG(1, 2)), c1, nn.NewReLU(), p1, c2, nn.NewReLU(), p2,
		nn.NewFlatten(p2.OutShape()), nn.NewLinear(p2.OutShape().Size(), 10))
	logits := model.Forward(nn.NewMatrix(4, 28*28)) // a batch of 4 blank images
	fmt.Println(p2.OutShape(), model.NumParams(), logits.Rows, logits.Cols)
	fmt.Println(model.Signature())
	// Output:
	// 7x7x16 11274 4 10
	// Conv2D(28x28x1,8,k5,s1,p2)|ReLU|MaxPool2D(28x28x8,2)|Conv2D(14x14x8,16,k5,s1,p2)|ReLU|MaxPool2D(14x14x16,2)|Flatten(7x7x16)|Linear(784,10)
}
