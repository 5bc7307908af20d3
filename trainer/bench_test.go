package trainer_test

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/nn"
)

// B3 measures what data parallelism costs: a 2-worker data-parallel MLP
// (gradients averaged every step) against the same two worker processes
// training independently at the same time (no communication). Both are timed
// inside the workers over the same steps, so process start-up and
// rendezvous are left out of both. Reported: independent time / DP time
// (1.0 means communication is free; the goal is ≥ 0.85).
func BenchmarkB3DataParallelThroughput(b *testing.B) {
	const (
		steps = 60
		batch = 64 // per worker
	)
	train := func(sync bool) trainer.TrainFunc {
		return func(ctx context.Context, s *trainer.Session) error {
			rng := rand.New(rand.NewPCG(1, uint64(s.WorldRank())))
			model := nn.NewSequential(rng, nn.NewLinear(784, 256), nn.NewReLU(), nn.NewLinear(256, 256), nn.NewReLU(), nn.NewLinear(256, 10))
			opt := nn.NewSGD(model.Params(), model.Grads(), nn.SGDConfig{LR: 0.01, Momentum: 0.9})
			dm, err := trainer.PrepareModel(ctx, s, model)
			if err != nil {
				return err
			}
			x := nn.NewMatrix(batch, 784)
			for i := range x.Data {
				x.Data[i] = float32(rng.NormFloat64())
			}
			labels := make([]int, batch)
			for i := range labels {
				labels[i] = rng.IntN(10)
			}
			var dout nn.Matrix
			step := func() error {
				model.ZeroGrad()
				nn.SoftmaxCrossEntropy(model.Forward(x), labels, &dout)
				model.Backward(&dout)
				if sync {
					if err := dm.SyncGradients(ctx); err != nil {
						return err
					}
				}
				opt.Step()
				return nil
			}
			for i := 0; i < 5; i++ { // warm up
				if err := step(); err != nil {
					return err
				}
			}
			if err := s.Barrier(ctx); err != nil {
				return err
			}
			start := time.Now()
			for i := 0; i < steps; i++ {
				if err := step(); err != nil {
					return err
				}
			}
			elapsed := []float64{time.Since(start).Seconds()}
			// The gang is as slow as its slowest worker.
			if err := s.AllReduceFloat64(ctx, elapsed, trainer.Sum); err != nil {
				return err
			}
			return s.Report(ctx, trainer.Metrics{"seconds": elapsed[0] / float64(s.WorldSize())}, nil)
		}
	}
	run := func(name string, sync bool) float64 {
		tr := trainer.New(train(sync), trainer.Scaling{NumWorkers: 2},
			trainer.Run{Name: name, StoragePath: b.TempDir()}, nil)
		tr.Args = []string{"-test.run=^$", "-test.bench=^" + b.Name() + "$", "-test.benchtime=1x"}
		tr.Stdout, tr.Stderr = os.Stderr, os.Stderr
		res, err := tr.Fit(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		return res.Metrics["seconds"].(float64)
	}
	for i := 0; i < b.N; i++ {
		independent := run("independent", false)
		dp := run("dp", true)
		b.ReportMetric(independent/dp, "dp/independent")
		b.ReportMetric(float64(2*batch*steps)/dp, "samples/s")
	}
}
