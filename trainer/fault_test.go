package trainer_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/data"
	"github.com/nomad-train/nomad-train/trainer/nn"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

const ftEpochs = 30

// ftTrain trains deterministically with a checkpoint every epoch and
// resumes from the latest one, so a run that loses workers must end with
// the same parameters as one that does not. Each worker records its pid in
// FT_PID_DIR (file name pid, content rank) for the test's killer.
func ftTrain(ctx context.Context, s *trainer.Session) error {
	if dir := os.Getenv("FT_PID_DIR"); dir != "" {
		os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), []byte(strconv.Itoa(s.WorldRank())), 0o644)
	}
	x, y := dpData()
	model, opt := dpModel()
	start := 0
	if ck := s.GetCheckpoint(); ck != nil {
		var done int
		if err := nn.LoadDir(ck.Path(), model, opt, &done); err != nil {
			return err
		}
		start = done + 1
	}
	dm, err := trainer.PrepareModel(ctx, s, model)
	if err != nil {
		return err
	}
	sampler := data.DistributedSampler{Len: dpSamples, Rank: s.WorldRank(), WorldSize: s.WorldSize(), Shuffle: true, Seed: 5}
	var bx, by, dout nn.Matrix
	loss := make([]float64, 1)
	for epoch := start; epoch < ftEpochs; epoch++ {
		loss[0] = 0
		for _, b := range data.Batches(sampler.Indices(epoch), dpBatch/s.WorldSize()) {
			fill(x, y, b, &bx, &by)
			model.ZeroGrad()
			loss[0] += nn.MSE(model.Forward(&bx), &by, &dout)
			model.Backward(&dout)
			if err := dm.SyncGradients(ctx); err != nil {
				return err
			}
			opt.Step()
			time.Sleep(5 * time.Millisecond) // leave the killer time to strike mid-epoch
		}
		if err := s.AllReduceFloat64(ctx, loss, trainer.Mean); err != nil {
			return err
		}
		ck, err := saveOnRank0(s, model, opt, epoch)
		if err != nil {
			return err
		}
		if err := s.Report(ctx, trainer.Metrics{"epoch": epoch, "loss": loss[0]}, ck); err != nil {
			return err
		}
	}
	return nil
}

// saveOnRank0 checkpoints model, optimizer and meta on rank 0; the other
// ranks contribute no files.
func saveOnRank0(s *trainer.Session, model *nn.Sequential, opt nn.Optimizer, meta any) (*trainer.Checkpoint, error) {
	if s.WorldRank() != 0 {
		return nil, nil
	}
	dir, err := s.NewCheckpointDir()
	if err != nil {
		return nil, err
	}
	if err := nn.SaveDir(dir, model, opt, meta); err != nil {
		return nil, err
	}
	return trainer.CheckpointFromDirectory(dir), nil
}

// sharedDir is a temporary directory the test's worker processes share
// with it through the environment variable name (workers inherit it).
func sharedDir(t *testing.T, name string) string {
	t.Helper()
	if dir := os.Getenv(name); dir != "" {
		return dir // a worker process: the launching test made it
	}
	dir := t.TempDir()
	t.Setenv(name, dir)
	return dir
}

// alive lists the pids in dir whose process still runs.
func alive(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil && !strings.Contains(string(stat), ") Z ") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func countRecords(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}

// TestSurvivesKills: five SIGKILLs of random workers at random points; the
// run recovers each time (replacement process, next generation, latest
// checkpoint) and ends with parameters bit-identical to a run without
// failures, and a metrics history with every epoch exactly once.
func TestSurvivesKills(t *testing.T) {
	pidDir := sharedDir(t, "FT_PID_DIR")
	storageDir := t.TempDir()
	clean, out, err := fit(t, ftTrain, 3, trainer.Run{Name: "clean", StoragePath: storageDir}, nil)
	must.NoError(t, err, must.Sprint(out))

	const kills = 5
	seed := uint64(time.Now().UnixNano())
	t.Logf("killer seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	progress := filepath.Join(storageDir, "faulty", storage.ProgressFile)
	killed := make(chan []string, 1)
	go func() {
		var log []string
		defer func() { killed <- log }()
		last := 0
		for len(log) < kills {
			// Strike only after the run made progress since the last kill.
			deadline := time.Now().Add(time.Minute)
			for countRecords(progress) <= last && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			last = countRecords(progress)
			if last >= ftEpochs-2 {
				return
			}
			time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
			pids := alive(pidDir)
			if len(pids) == 0 {
				continue
			}
			pid := pids[rng.IntN(len(pids))]
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				log = append(log, fmt.Sprintf("pid %d after %d records", pid, last))
			}
		}
	}()
	res, out, err := fit(t, ftTrain, 3, trainer.Run{Name: "faulty", StoragePath: storageDir,
		Failure: trainer.FailureConfig{MaxFailures: -1}}, nil)
	log := <-killed
	t.Logf("kills: %v", log)
	must.NoError(t, err, must.Sprint(out))
	must.SliceLen(t, kills, log, must.Sprint("the run ended before the killer was done"))
	must.SliceLen(t, kills, res.Recovered, must.Sprint(out))

	st, err := storage.OpenReadOnly(storageDir, "faulty", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.SliceLen(t, ftEpochs, recs)
	for i, r := range recs {
		must.Eq(t, float64(i), r.Metrics["epoch"].(float64), must.Sprintf("record %d", i))
		must.Eq(t, int64(i+1), r.Step)
	}
	want, err := os.ReadFile(filepath.Join(clean.Checkpoint.Path(), "model.bin"))
	must.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(res.Checkpoint.Path(), "model.bin"))
	must.NoError(t, err)
	must.True(t, bytes.Equal(want, got), must.Sprint("parameters after recovery differ from the fault-free run"))
	// The losses match too: recovery replays exactly.
	cst, _ := storage.OpenReadOnly(storageDir, "clean", storage.Policy{})
	crecs, _ := cst.Records()
	for i := range crecs {
		must.Eq(t, crecs[i].Metrics["loss"], recs[i].Metrics["loss"])
	}
	must.SliceEmpty(t, alive(pidDir))
}

// When the budget is spent the run fails with that reason and leaves no
// process behind.
func TestBudgetExhausted(t *testing.T) {
	pidDir := sharedDir(t, "FT_PID_DIR")
	storageDir := t.TempDir()
	progress := filepath.Join(storageDir, "budget", storage.ProgressFile)
	go func() {
		for kills, last := 0, 0; kills < 3; {
			for countRecords(progress) <= last {
				time.Sleep(10 * time.Millisecond)
			}
			last = countRecords(progress)
			if pids := alive(pidDir); len(pids) > 0 && syscall.Kill(pids[0], syscall.SIGKILL) == nil {
				kills++
			}
		}
	}()
	res, out, err := fit(t, ftTrain, 2, trainer.Run{Name: "budget", StoragePath: storageDir,
		Failure: trainer.FailureConfig{MaxFailures: 2}}, nil)
	must.ErrorIs(t, err, trainer.ErrRunFailed, must.Sprint(out))
	must.StrContains(t, err.Error(), "failure budget exhausted")
	must.StrContains(t, err.Error(), "max_failures is 2")
	must.SliceLen(t, 2, res.Recovered, must.Sprint(out))
	f, failed, err := storage.FailedForGood(storageDir, "budget", "")
	must.NoError(t, err)
	must.True(t, failed)
	must.Eq(t, trainer.ExitBudgetExhausted, f.ExitCode)
	must.SliceEmpty(t, alive(pidDir))
}

const (
	ppEpochs  = 10
	ppBatches = dpSamples / dpBatch // steps per epoch
)

// ppTrain checks ShouldCheckpoint every step, and on a stop checkpoints
// the exact step it reached (epoch and batch), so a resumed run goes on
// from there. Rank 0 logs every step it executes to PP_STEPS (see
// readSteps).
func ppTrain(ctx context.Context, s *trainer.Session) error {
	x, y := dpData()
	model, opt := dpModel()
	var pos [2]int // epoch, batch to resume at
	if ck := s.GetCheckpoint(); ck != nil {
		if err := nn.LoadDir(ck.Path(), model, opt, &pos); err != nil {
			return err
		}
	}
	startEpoch, startBatch := pos[0], pos[1]
	dm, err := trainer.PrepareModel(ctx, s, model)
	if err != nil {
		return err
	}
	save := func(epoch, batch int) error {
		ck, err := saveOnRank0(s, model, opt, [2]int{epoch, batch})
		if err != nil {
			return err
		}
		return s.Report(ctx, trainer.Metrics{"epoch": epoch, "batch": batch}, ck)
	}
	steps, _ := os.OpenFile(os.Getenv("PP_STEPS"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	defer steps.Close()
	if dir := os.Getenv("PP_PID_DIR"); dir != "" { // which process ran which rank in which generation
		name := fmt.Sprintf("g%d-%d", s.Generation(), os.Getpid())
		os.WriteFile(filepath.Join(dir, name), []byte(strconv.Itoa(s.WorldRank())), 0o644)
	}
	sampler := data.DistributedSampler{Len: dpSamples, Rank: s.WorldRank(), WorldSize: s.WorldSize(), Shuffle: true, Seed: 9}
	var bx, by, dout nn.Matrix
	for epoch := startEpoch; epoch < ppEpochs; epoch++ {
		batches := data.Batches(sampler.Indices(epoch), dpBatch/s.WorldSize())
		for b := startBatch; b < len(batches); b++ {
			fill(x, y, batches[b], &bx, &by)
			model.ZeroGrad()
			nn.MSE(model.Forward(&bx), &by, &dout)
			model.Backward(&dout)
			if err := dm.SyncGradients(ctx); err != nil {
				return err
			}
			opt.Step()
			if s.WorldRank() == 0 { // step, generation, time
				fmt.Fprintf(steps, "%d %d %d\n", epoch*ppBatches+b, s.Generation(), time.Now().UnixNano())
				ppPause(ctx, s.Generation(), epoch*ppBatches+b)
			}
			time.Sleep(5 * time.Millisecond)
			stop, err := s.ShouldCheckpoint(ctx)
			if err != nil {
				return err
			}
			if stop {
				return save(epoch, b+1) // resume at the next batch
			}
		}
		startBatch = 0
		if err := save(epoch+1, 0); err != nil {
			return err
		}
	}
	return nil
}

// TestPreemptionLosesNoSteps: SIGTERM (a Nomad stop or drain) reaches the
// workers mid-epoch; they agree to stop, checkpoint the step they reached
// and exit; running the same run again resumes there. Every step runs
// exactly once, and the parameters equal those of an uninterrupted run.
func TestPreemptionLosesNoSteps(t *testing.T) {
	stepsFile := os.Getenv("PP_STEPS")
	if stepsFile == "" {
		stepsFile = filepath.Join(t.TempDir(), "steps")
		t.Setenv("PP_STEPS", stepsFile)
	}
	storageDir := t.TempDir()
	run := trainer.Run{Name: "preempt", StoragePath: storageDir}

	tr := trainer.New(ppTrain, trainer.Scaling{NumWorkers: 2}, run, nil)
	tr.Args = []string{"-test.run=^" + t.Name() + "$"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if workerenv.IsWorker() {
			return // only the launching test process stops the run
		}
		for countRecords(stepsFile) < 2*ppBatches+3 { // mid-epoch 2
			time.Sleep(5 * time.Millisecond)
		}
		cancel() // the launcher sends SIGTERM to every worker
	}()
	_, err := tr.Fit(ctx)
	must.ErrorIs(t, err, trainer.ErrStopped, must.Sprint(out.String()))
	stoppedAt := countRecords(stepsFile)
	must.Less(t, ppEpochs*ppBatches, stoppedAt)

	res, outs, err := fit(t, ppTrain, 2, run, nil)
	must.NoError(t, err, must.Sprint(outs))

	checkEveryStepOnce(t, readSteps(t, stepsFile))
	// The second start's reports carry attempt 1, from the step after the
	// first's last: the history shows where the run started again, though
	// each start's rendezvous began at generation 1.
	st, err := storage.OpenReadOnly(storageDir, "preempt", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.NoError(t, st.Close())
	again := slices.IndexFunc(recs, func(r storage.Record) bool { return r.Attempt == 1 })
	must.Positive(t, again, must.Sprintf("records of a second start: %+v", recs))
	for _, r := range recs[:again] {
		must.EqOp(t, 0, r.Attempt)
	}
	for _, r := range recs[again:] {
		must.EqOp(t, 1, r.Attempt)
	}
	must.EqOp(t, recs[again-1].Step+1, recs[again].Step)

	t.Setenv("PP_STEPS", filepath.Join(t.TempDir(), "clean-steps"))
	clean, outs, err := fit(t, ppTrain, 2, trainer.Run{Name: "clean", StoragePath: storageDir}, nil)
	must.NoError(t, err, must.Sprint(outs))
	want, _ := os.ReadFile(filepath.Join(clean.Checkpoint.Path(), "model.bin"))
	got, _ := os.ReadFile(filepath.Join(res.Checkpoint.Path(), "model.bin"))
	must.True(t, len(want) > 0 && bytes.Equal(want, got), must.Sprint("parameters after preemption differ from an uninterrupted run"))
}

// TestHungWorkerDetected: a SIGSTOPped worker neither fails nor exits. Its
// peers' watchdog notices that no collective completes, they re-form the
// gang without it, the launcher kills the frozen process when it does not
// rejoin, and its replacement lets the run finish.
func TestHungWorkerDetected(t *testing.T) {
	pidDir := sharedDir(t, "FT_PID_DIR")
	t.Setenv("NOMAD_TRAIN_LEASE_TTL", "30s") // the watchdog, not the lease, must notice
	storageDir := t.TempDir()
	progress := filepath.Join(storageDir, "hung", storage.ProgressFile)
	stopped := make(chan int, 1)
	go func() {
		if workerenv.IsWorker() {
			return
		}
		for countRecords(progress) < 3 {
			time.Sleep(5 * time.Millisecond)
		}
		pids := alive(pidDir)
		syscall.Kill(pids[len(pids)-1], syscall.SIGSTOP)
		stopped <- pids[len(pids)-1]
	}()
	start := time.Now()
	res, out, err := fit(t, ftTrain, 3, trainer.Run{Name: "hung", StoragePath: storageDir,
		Failure: trainer.FailureConfig{MaxFailures: 1, StallFloor: time.Second, StallFactor: 10, RejoinTimeout: 2 * time.Second}}, nil)
	must.NoError(t, err, must.Sprint(out))
	pid := <-stopped
	t.Logf("stopped pid %d; run took %v", pid, time.Since(start))
	must.SliceLen(t, 1, res.Recovered, must.Sprint(out))
	must.Eq(t, "killed by SIGKILL", res.Recovered[0].Message)
	must.StrContains(t, out, "no collective completed for")
	must.StrContains(t, out, "presumed hung, killing it")
	st, err := storage.OpenReadOnly(storageDir, "hung", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.SliceLen(t, ftEpochs, recs)
	must.SliceEmpty(t, alive(pidDir))
}

// A storage_path that is not one directory for every worker (a relative
// path on a cluster, a volume mounted on one node only) fails the run at
// start-up with a clear error and for good, before any training: rank 1
// here sees another node's (empty) file system when it looks for what rank
// 0 wrote.
func TestUnsharedStorageFailsAtStart(t *testing.T) {
	trainer.SetProbeView(1, sharedDir(t, "FT_OTHER_NODE"))
	storageDir := t.TempDir()
	trained := sharedDir(t, "FT_TRAINED")
	fn := func(ctx context.Context, s *trainer.Session) error {
		return os.WriteFile(filepath.Join(trained, fmt.Sprint(s.WorldRank())), nil, 0o644)
	}
	_, out, err := fit(t, fn, 2, trainer.Run{Name: "unshared", StoragePath: storageDir,
		Failure: trainer.FailureConfig{MaxFailures: 3}}, nil)
	must.ErrorIs(t, err, trainer.ErrRunFailed, must.Sprint(out))
	must.StrContains(t, err.Error(), "storage_path is not shared between workers: rank 1 cannot read")
	must.StrContains(t, err.Error(), filepath.Join(storageDir, "unshared"))
	f, failed, err := storage.FailedForGood(storageDir, "unshared", "")
	must.NoError(t, err)
	must.True(t, failed)
	must.Eq(t, trainer.ExitBadEnv, f.ExitCode)
	entries, err := os.ReadDir(trained)
	must.NoError(t, err)
	must.SliceEmpty(t, entries, must.Sprint("the training function ran"))
}
