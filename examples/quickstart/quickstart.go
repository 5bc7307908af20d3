// Package quickstart is Ray Train's quick start in Go: a linear model
// Linear(10→1) fitted with MSE to 1000 samples of y = Xw + b + noise, on
// several data-parallel workers, reporting the loss and saving a checkpoint
// every epoch, and resuming from the latest checkpoint when there is one.
//
// It is the built-in entrypoint "quickstart" (examples/quickstart/train.hcl)
// and the training function of the Go program in cmd/.
package quickstart

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/data"
	"github.com/nomad-train/nomad-train/trainer/nn"
)

// Config is the training loop config.
type Config struct {
	LR        float64 `json:"lr"`
	Momentum  float64 `json:"momentum"`
	Epochs    int     `json:"epochs"`
	BatchSize int     `json:"batch_size"` // global: split evenly over the workers
	Samples   int     `json:"samples"`
	Noise     float64 `json:"noise"`
	Seed      uint64  `json:"seed"`
}

// CheckGang reports whether the config fits every gang size from
// minWorkers to maxWorkers (nomad-train validate asks, with the spec's
// num_workers): its global batch splits over each.
func (c Config) CheckGang(minWorkers, maxWorkers int) error {
	return data.CheckGlobalBatch("batch_size", c.BatchSize, minWorkers, maxWorkers)
}

// DefaultConfig is Ray's quick start: batch 32, 10 epochs, 1000 samples.
func DefaultConfig() Config {
	return Config{LR: 0.05, Momentum: 0.9, Epochs: 10, BatchSize: 32, Samples: 1000, Noise: 0.1, Seed: 42}
}

const features = 10

// Train is the training function: every worker runs it.
func Train(ctx context.Context, s *trainer.Session) error {
	cfg := DefaultConfig()
	if err := s.DecodeConfig(&cfg); err != nil {
		return err
	}
	if err := data.CheckGlobalBatch("batch_size", cfg.BatchSize, s.WorldSize(), s.WorldSize()); err != nil {
		return err
	}
	x, y := Dataset(cfg)
	model := nn.NewSequential(rand.New(rand.NewPCG(cfg.Seed, 1)), nn.NewLinear(features, 1))
	opt := nn.NewSGD(model.Params(), model.Grads(), nn.SGDConfig{LR: float32(cfg.LR), Momentum: float32(cfg.Momentum)})

	start := 0
	if ck := s.GetCheckpoint(); ck != nil {
		epoch, err := load(ck.Path(), model, opt)
		if err != nil {
			return fmt.Errorf("restore checkpoint %s: %w", ck.Path(), err)
		}
		start = epoch + 1
		if s.WorldRank() == 0 {
			fmt.Printf("resuming after epoch %d from %s\n", epoch, ck.Path())
		}
	}
	dm, err := trainer.PrepareModel(ctx, s, model)
	if err != nil {
		return err
	}

	sampler := data.DistributedSampler{Len: cfg.Samples, Rank: s.WorldRank(), WorldSize: s.WorldSize(), Shuffle: true, Seed: int64(cfg.Seed)}
	local := cfg.BatchSize / s.WorldSize()
	bx, by := nn.NewMatrix(local, features), nn.NewMatrix(local, 1)
	var dout nn.Matrix
	stats := make([]float64, 2) // loss sum, batches
	for epoch := start; epoch < cfg.Epochs; epoch++ {
		stats[0], stats[1] = 0, 0
		for _, batch := range data.Batches(sampler.Indices(epoch), local) {
			gather(x, y, batch, bx, by)
			model.ZeroGrad()
			pred := model.Forward(bx)
			stats[0] += nn.MSE(pred, by, &dout)
			stats[1]++
			model.Backward(&dout)
			if err := dm.SyncGradients(ctx); err != nil {
				return err
			}
			opt.Step()
		}
		if err := s.AllReduceFloat64(ctx, stats, trainer.Sum); err != nil {
			return err
		}
		loss := stats[0] / stats[1]
		var ck *trainer.Checkpoint
		if s.WorldRank() == 0 {
			if ck, err = save(s, epoch, model, opt); err != nil {
				return err
			}
			fmt.Printf("epoch %d: loss %.6f\n", epoch, loss)
		}
		if err := s.Report(ctx, trainer.Metrics{"epoch": epoch, "loss": loss}, ck); err != nil {
			return err
		}
		// Asked to stop (Ctrl-C, a Nomad stop or drain, a tuner's early
		// stop): this epoch's checkpoint is committed, so stop here.
		if stop, err := s.ShouldCheckpoint(ctx); err != nil || stop {
			return err
		}
	}
	return nil
}

// Dataset makes the synthetic regression data: the same on every worker,
// from the seed.
func Dataset(cfg Config) (x, y *nn.Matrix) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	w := make([]float32, features)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	b := float32(rng.NormFloat64())
	x, y = nn.NewMatrix(cfg.Samples, features), nn.NewMatrix(cfg.Samples, 1)
	for i := 0; i < cfg.Samples; i++ {
		row := x.Row(i)
		sum := b
		for j := range row {
			row[j] = float32(rng.NormFloat64())
			sum += row[j] * w[j]
		}
		y.Data[i] = sum + float32(cfg.Noise*rng.NormFloat64())
	}
	return x, y
}

func gather(x, y *nn.Matrix, idx []int, bx, by *nn.Matrix) {
	bx.Resize(len(idx), x.Cols)
	by.Resize(len(idx), y.Cols)
	for i, j := range idx {
		copy(bx.Row(i), x.Row(j))
		copy(by.Row(i), y.Row(j))
	}
}

type meta struct {
	Epoch int `json:"epoch"`
}

// save writes the model, its optimizer state and the epoch into a fresh
// checkpoint directory on the run's storage.
func save(s *trainer.Session, epoch int, model *nn.Sequential, opt nn.Optimizer) (*trainer.Checkpoint, error) {
	dir, err := s.NewCheckpointDir()
	if err != nil {
		return nil, err
	}
	if err := nn.SaveDir(dir, model, opt, meta{Epoch: epoch}); err != nil {
		return nil, err
	}
	return trainer.CheckpointFromDirectory(dir), nil
}

// load restores a checkpoint written by save and returns its epoch.
func load(dir string, model *nn.Sequential, opt nn.Optimizer) (int, error) {
	var m meta
	if err := nn.LoadDir(dir, model, opt, &m); err != nil {
		return 0, err
	}
	return m.Epoch, nil
}
