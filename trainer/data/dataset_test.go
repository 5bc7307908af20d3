package data

import (
	"math/rand/v2"
	"testing"

	"github.com/nomad-train/nomad-train/trainer/nn"
	"github.com/shoenig/test/must"
)

func TestGather(t *testing.T) {
	d := &Dataset{
		X: []float32{0, 1, 10, 11, 20, 21}, Features: 2,
		Y: []float32{0.5, 1.5, 2.5}, Targets: 1,
		Labels: []int{2, 1, 0},
	}
	must.NoError(t, d.Validate())
	must.Eq(t, 3, d.Len())
	var x, y nn.Matrix
	d.Gather([]int{2, 0}, &x, &y)
	must.Eq(t, nn.Matrix{Rows: 2, Cols: 2, Data: []float32{20, 21, 0, 1}}, x)
	must.Eq(t, []float32{2.5, 0.5}, y.Data)
	labels := d.GatherLabels([]int{1, 1, 2}, &x, nil)
	must.Eq(t, []int{1, 1, 0}, labels)
	must.Eq(t, []float32{10, 11, 10, 11, 20, 21}, x.Data)

	buf := make([]int, 0, 4)
	allocs := testing.AllocsPerRun(50, func() {
		d.Gather([]int{1, 2}, &x, &y)
		buf = d.GatherLabels([]int{0, 1}, &x, buf)
	})
	must.Eq(t, 0.0, allocs)
}

func TestDatasetValidate(t *testing.T) {
	for _, d := range []*Dataset{
		{X: []float32{1, 2, 3}, Features: 2},
		{X: []float32{1, 2}, Features: 0},
		{X: []float32{1, 2}, Features: 1, Y: []float32{1}, Targets: 1},
		{X: []float32{1, 2}, Features: 1, Labels: []int{1, 2, 3}},
	} {
		must.ErrorIs(t, d.Validate(), ErrDatasetShape)
	}
}

// TestQuickstartRegression trains Linear(10→1) on the generated data, with
// every rank's shard batched by the sampler, and recovers w and b: the
// pieces fit together as the quickstart uses them.
func TestQuickstartRegression(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	ds, w, b := LinearRegression(rng, 1000, 10, 0.01)
	must.NoError(t, ds.Validate())
	model := nn.NewSequential(rng, nn.NewLinear(10, 1))
	opt := nn.NewSGD(model.Params(), model.Grads(), nn.SGDConfig{LR: 0.01, Momentum: 0.9})
	s := DistributedSampler{Len: ds.Len(), Rank: 1, WorldSize: 2, Shuffle: true, Seed: 7}
	var x, y, g nn.Matrix
	var loss float64
	for epoch := 0; epoch < 10; epoch++ {
		for _, batch := range Batches(s.Indices(epoch), 32) {
			ds.Gather(batch, &x, &y)
			model.ZeroGrad()
			loss = nn.MSE(model.Forward(&x), &y, &g)
			model.Backward(&g)
			opt.Step()
		}
	}
	must.Less(t, 0.01, loss)
	lin := model.Layers()[0].(*nn.Linear)
	for j := range w {
		must.InDelta(t, w[j], lin.Weight()[j], 0.01)
	}
	must.InDelta(t, b, lin.Bias()[0], 0.01)
}

func TestBlobsSeparable(t *testing.T) {
	ds := Blobs(rand.New(rand.NewPCG(2, 2)), 300, 4, 3, 5)
	must.NoError(t, ds.Validate())
	model := nn.NewSequential(rand.New(rand.NewPCG(3, 3)), nn.NewLinear(4, 16), nn.NewReLU(), nn.NewLinear(16, 3))
	opt := nn.NewAdam(model.Params(), model.Grads(), nn.AdamConfig{LR: 0.01})
	all := DistributedSampler{Len: ds.Len(), WorldSize: 1}.Indices(0)
	var x, g nn.Matrix
	labels := ds.GatherLabels(all, &x, nil)
	for i := 0; i < 200; i++ {
		model.ZeroGrad()
		nn.SoftmaxCrossEntropy(model.Forward(&x), labels, &g)
		model.Backward(&g)
		opt.Step()
	}
	must.Greater(t, 0.97, nn.Accuracy(model.Forward(&x), labels))
}
