package trainer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/data"
	"github.com/nomad-train/nomad-train/trainer/nn"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// fit runs fn on n worker processes: copies of this test binary that run
// only the calling test, in which Fit runs fn and exits.
func fit(t *testing.T, fn trainer.TrainFunc, n int, run trainer.Run, config any) (*trainer.Result, string, error) {
	t.Helper()
	t.Setenv("GORACE", "atexit_sleep_ms=0") // workers under -race exit at once
	if run.StoragePath == "" {
		run.StoragePath = t.TempDir()
	}
	tr := trainer.New(fn, trainer.Scaling{NumWorkers: n}, run, config)
	tr.Args = []string{"-test.run=^" + t.Name() + "$", "-test.count=1"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := tr.Fit(ctx)
	return res, out.String(), err
}

// The data-parallel problem both the 4-worker run and the one-process
// reference train: an MLP on a fixed synthetic regression set.
const (
	dpSamples = 256
	dpBatch   = 32 // global
	dpSteps   = 100
	dpLR      = 0.05
)

func dpData() (x, y *nn.Matrix) {
	rng := rand.New(rand.NewPCG(7, 7))
	x, y = nn.NewMatrix(dpSamples, 8), nn.NewMatrix(dpSamples, 1)
	for i := 0; i < dpSamples; i++ {
		var s float32
		row := x.Row(i)
		for j := range row {
			row[j] = float32(rng.NormFloat64())
			s += row[j] * float32(j%3-1)
		}
		y.Data[i] = float32(math.Tanh(float64(s)))
	}
	return x, y
}

func dpModel() (*nn.Sequential, *nn.SGD) {
	m := nn.NewSequential(rand.New(rand.NewPCG(3, 4)), nn.NewLinear(8, 16), nn.NewTanh(), nn.NewLinear(16, 1))
	return m, nn.NewSGD(m.Params(), m.Grads(), nn.SGDConfig{LR: dpLR, Momentum: 0.9})
}

func fill(x, y *nn.Matrix, idx []int, bx, by *nn.Matrix) {
	bx.Resize(len(idx), x.Cols)
	by.Resize(len(idx), 1)
	for i, j := range idx {
		copy(bx.Row(i), x.Row(j))
		by.Data[i] = y.Data[j]
	}
}

func paramsBytes(p []float32) []byte {
	b := make([]byte, 4*len(p))
	for i, v := range p {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// dpTrain is the worker side: each rank trains on its shard of every global
// batch, averaging gradients; rank 0 reports the global loss every step and
// saves the final parameters; every rank checks all ranks hold the same bits.
func dpTrain(ctx context.Context, s *trainer.Session) error {
	x, y := dpData()
	model, opt := dpModel()
	dm, err := trainer.PrepareModel(ctx, s, model)
	if err != nil {
		return err
	}
	sampler := data.DistributedSampler{Len: dpSamples, Rank: s.WorldRank(), WorldSize: s.WorldSize(), Shuffle: true, Seed: 11}
	local := dpBatch / s.WorldSize()
	var bx, by, dout nn.Matrix
	loss := make([]float64, 1)
	for step, epoch := 0, 0; step < dpSteps; epoch++ {
		for _, b := range data.Batches(sampler.Indices(epoch), local) {
			if step == dpSteps {
				break
			}
			fill(x, y, b, &bx, &by)
			model.ZeroGrad()
			loss[0] = nn.MSE(model.Forward(&bx), &by, &dout)
			model.Backward(&dout)
			if err := dm.SyncGradients(ctx); err != nil {
				return err
			}
			opt.Step()
			if err := s.AllReduceFloat64(ctx, loss, trainer.Mean); err != nil {
				return err
			}
			step++
			if err := s.Report(ctx, trainer.Metrics{"step": step, "loss": loss[0]}, nil); err != nil {
				return err
			}
		}
	}
	sum := sha256.Sum256(paramsBytes(model.Params()))
	all, err := s.AllGather(ctx, sum[:])
	if err != nil {
		return err
	}
	for r, h := range all {
		if !bytes.Equal(h, sum[:]) {
			return fmt.Errorf("parameters of rank %d differ from rank %d's", r, s.WorldRank())
		}
	}
	var ck *trainer.Checkpoint
	if s.WorldRank() == 0 {
		dir, err := s.NewCheckpointDir()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "params.bin"), paramsBytes(model.Params()), 0o644); err != nil {
			return err
		}
		ck = trainer.CheckpointFromDirectory(dir)
	}
	return s.Report(ctx, trainer.Metrics{"final": true}, ck)
}

// TestDataParallelMatchesOneProcess: 4 worker processes keep bit-identical
// parameters for 100 steps, and their loss curve and final parameters match
// one process training on the same global batches.
func TestDataParallelMatchesOneProcess(t *testing.T) {
	res, out, err := fit(t, dpTrain, 4, trainer.Run{Name: "dp"}, nil)
	must.NoError(t, err, must.Sprint(out))

	st, err := storage.Open(filepath.Dir(res.Path), "dp", storage.Policy{})
	must.NoError(t, err)
	defer st.Close()
	recs, err := st.Records()
	must.NoError(t, err)
	must.Len(t, dpSteps+1, recs)

	// The reference: one process, global batch dpBatch, same order.
	x, y := dpData()
	model, opt := dpModel()
	sampler := data.DistributedSampler{Len: dpSamples, Rank: 0, WorldSize: 1, Shuffle: true, Seed: 11}
	var bx, by, dout nn.Matrix
	for step, epoch := 0, 0; step < dpSteps; epoch++ {
		for _, b := range data.Batches(sampler.Indices(epoch), dpBatch) {
			if step == dpSteps {
				break
			}
			fill(x, y, b, &bx, &by)
			model.ZeroGrad()
			want := nn.MSE(model.Forward(&bx), &by, &dout)
			model.Backward(&dout)
			opt.Step()
			got := recs[step].Metrics["loss"].(float64)
			if math.Abs(got-want) > 1e-4*math.Max(1, math.Abs(want)) {
				t.Fatalf("step %d: 4-worker loss %.9g, one-process loss %.9g", step+1, got, want)
			}
			step++
		}
	}
	last := recs[len(recs)-1]
	must.NotEq(t, "", last.Checkpoint)
	b, err := os.ReadFile(filepath.Join(res.Path, last.Checkpoint, "params.bin"))
	must.NoError(t, err)
	ref := model.Params()
	must.Eq(t, 4*len(ref), len(b))
	for i, v := range ref {
		got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		if math.Abs(float64(got-v)) > 1e-3 {
			t.Fatalf("parameter %d: 4 workers %g, one process %g", i, got, v)
		}
	}
	// Losses went down: the run trained.
	first := recs[0].Metrics["loss"].(float64)
	final := recs[dpSteps-1].Metrics["loss"].(float64)
	must.Less(t, first/2, final)
}

var errBoom = errors.New("boom")

// A worker whose training function fails fails the run with that rank's
// error first; the others, cut off from it, end too, and none is left.
func TestWorkerFailureFailsRun(t *testing.T) {
	pidDir := sharedDir(t, "TEST_PID_DIR")
	fn := func(ctx context.Context, s *trainer.Session) error {
		os.WriteFile(filepath.Join(pidDir, fmt.Sprint(os.Getpid())), nil, 0o644)
		buf := make([]float32, 1<<16)
		for step := 0; ; step++ {
			if s.WorldRank() == 2 && step == 3 {
				return fmt.Errorf("step %d: %w", step, errBoom)
			}
			if err := s.AllReduceFloat32(ctx, buf, trainer.Sum); err != nil {
				return err
			}
		}
	}
	res, out, err := fit(t, fn, 3, trainer.Run{Name: "fail"}, nil)
	must.ErrorIs(t, err, trainer.ErrRunFailed, must.Sprint(out))
	must.StrContains(t, err.Error(), "rank 2")
	must.StrContains(t, err.Error(), "boom")
	must.NotNil(t, res)
	must.SliceNotEmpty(t, res.Errors)
	must.Eq(t, 2, res.Errors[0].Rank)
	must.Eq(t, trainer.ExitUserError, res.Errors[0].ExitCode)
	// The run is marked failed for good, so a Nomad driver would refuse to
	// restart its workers; only a deliberate new launch clears the mark.
	f, failed, err := storage.FailedForGood(filepath.Dir(res.Path), "fail", "")
	must.NoError(t, err)
	must.True(t, failed)
	must.StrContains(t, f.Reason, "boom")
	pids, _ := os.ReadDir(pidDir)
	must.Len(t, 3, pids)
	for _, p := range pids {
		if _, err := os.Stat("/proc/" + p.Name()); err == nil {
			status, _ := os.ReadFile("/proc/" + p.Name() + "/status")
			if !strings.Contains(string(status), "zombie") {
				t.Errorf("worker process %s is still running", p.Name())
			}
		}
	}
}

// A panic in the training function is the user's error, with the panic's
// message.
func TestPanicIsUserError(t *testing.T) {
	fn := func(ctx context.Context, s *trainer.Session) error {
		if s.WorldRank() == 1 {
			panic("index out of range in my code")
		}
		return s.Barrier(ctx)
	}
	res, out, err := fit(t, fn, 2, trainer.Run{Name: "panic"}, nil)
	must.ErrorIs(t, err, trainer.ErrRunFailed, must.Sprint(out))
	must.Eq(t, 1, res.Errors[0].Rank)
	must.Eq(t, trainer.ExitUserError, res.Errors[0].ExitCode)
	must.StrContains(t, res.Errors[0].Message, "index out of range in my code")
}

// Ranks, sizes, the run's name and config reach every worker; output is
// prefixed by rank.
func TestSessionBasics(t *testing.T) {
	type cfg struct {
		Greeting string `json:"greeting"`
	}
	fn := func(ctx context.Context, s *trainer.Session) error {
		var c cfg
		if err := s.DecodeConfig(&c); err != nil {
			return err
		}
		fmt.Printf("%s from %d/%d local %d/%d node %d of %s\n", c.Greeting, s.WorldRank(), s.WorldSize(), s.LocalRank(), s.LocalWorldSize(), s.NodeRank(), s.RunName())
		if s.GetCheckpoint() != nil {
			return errors.New("fresh run has a checkpoint")
		}
		return nil
	}
	_, out, err := fit(t, fn, 3, trainer.Run{Name: "basics"}, cfg{Greeting: "hello"})
	must.NoError(t, err, must.Sprint(out))
	for r := 0; r < 3; r++ {
		must.StrContains(t, out, fmt.Sprintf("[rank %d] hello from %d/3 local %d/3 node 0 of basics", r, r, r))
	}
}
