package mnist_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/examples/mnist"
	"github.com/nomad-train/nomad-train/trainer/data"
	"github.com/nomad-train/nomad-train/trainer/nn"
)

// sets opens MNIST's train and test sets, skipping when the module is not
// in the cache (go mod download puts it there).
func sets(tb testing.TB) (train, test *mnist.Set) {
	tb.Helper()
	return setsOf(tb, mnist.DefaultConfig())
}

// setsOf opens cfg's data set, skipping when it is missing.
func setsOf(tb testing.TB, cfg mnist.Config) (train, test *mnist.Set) {
	tb.Helper()
	if os.Getenv("GOMODCACHE") == "" {
		// The module cache may be set with `go env -w`; workers inherit this.
		if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
			tb.Setenv("GOMODCACHE", string(bytes.TrimSpace(out)))
		}
	}
	dir, err := mnist.DataDir(cfg, os.Getenv)
	if err != nil {
		tb.Skipf("no %s here: %v", cfg.Dataset, err)
	}
	cfg.CacheDir = cacheDir(tb) + "/" + cfg.Dataset
	train, err = mnist.Open(dir, cfg.CacheDir, "train")
	must.NoError(tb, err)
	tb.Cleanup(func() { train.Close() })
	test, err = mnist.Open(dir, cfg.CacheDir, "t10k")
	must.NoError(tb, err)
	tb.Cleanup(func() { test.Close() })
	return train, test
}

// cacheDir is one unpack folder shared by the package's tests.
func cacheDir(tb testing.TB) string {
	tb.Helper()
	d, err := os.UserCacheDir()
	if err != nil {
		return tb.TempDir()
	}
	return d + "/nomad-train/test-mnist"
}

// trainLocal trains cfg's model in this process on one worker for at most
// steps steps (0: cfg.Epochs epochs) with backend be, returning the loss of
// every step.
func trainLocal(tb testing.TB, cfg mnist.Config, be nn.Backend, train data.Source, steps int, onEpoch func(int, *nn.Sequential)) ([]float64, *nn.Sequential) {
	tb.Helper()
	m, err := mnist.NewModel(cfg)
	must.NoError(tb, err)
	m.SetBackend(be)
	opt, err := mnist.NewOptimizer(cfg, m)
	must.NoError(tb, err)
	if cfg.TrainSamples > 0 {
		train = mnist.Limit{Source: train, N: cfg.TrainSamples}
	}
	split := data.StreamSplit{Source: train, WorldSize: 1, Shuffle: true, Seed: int64(cfg.Seed)}
	var st mnist.Step
	var losses []float64
	for epoch := 0; epoch < cfg.Epochs; epoch++ {
		stream, err := split.Epoch(context.Background(), epoch, cfg.BatchSize)
		must.NoError(tb, err)
		for b, ok := stream.Next(); ok; b, ok = stream.Next() {
			losses = append(losses, st.Forward(m, b.Records))
			opt.Step()
			if steps > 0 && len(losses) == steps {
				stream.Close()
				return losses, m
			}
		}
		must.NoError(tb, stream.Err())
		stream.Close()
		if onEpoch != nil {
			onEpoch(epoch, m)
		}
	}
	return losses, m
}

func accuracy(tb testing.TB, m *nn.Sequential, test data.Source) float64 {
	var st mnist.Step
	c, n, err := mnist.Evaluate(m, test, 0, 1, &st)
	must.NoError(tb, err)
	return float64(c) / float64(n)
}

// TestLocalAccuracy is a tuning aid: one in-process worker, the default
// config. Run it with -run TestLocalAccuracy -v.
func TestLocalAccuracy(t *testing.T) {
	if os.Getenv("MNIST_TUNE") == "" {
		t.Skip("set MNIST_TUNE to a JSON config to run")
	}
	cfg := mnist.DefaultConfig()
	if err := json.Unmarshal([]byte(os.Getenv("MNIST_TUNE")), &cfg); err != nil {
		t.Fatal(err)
	}
	train, test := setsOf(t, cfg)
	trainLocal(t, cfg, nn.Gonum{}, train, 0, func(e int, m *nn.Sequential) {
		t.Logf("%+v epoch %d: accuracy %.4f", cfg, e, accuracy(t, m, test))
	})
}

// Logistic regression (the "mnist-logreg" builtin's model and optimizer)
// learns MNIST from a tenth of the training set in one epoch.
func TestLogRegLearns(t *testing.T) {
	train, test := sets(t)
	cfg := mnist.LogRegConfig()
	cfg.Epochs, cfg.TrainSamples = 1, 6000
	_, m := trainLocal(t, cfg, nn.Gonum{}, train, 0, nil)
	must.Eq(t, "Linear(784,10)", m.Signature())
	acc := accuracy(t, m, test)
	t.Logf("logistic regression, 6000 images, 1 epoch: test accuracy %.4f", acc)
	must.Greater(t, 0.85, acc)
}
