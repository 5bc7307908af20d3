package trainer_test

import (
	"bytes"
	"context"
	"fmt"
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
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// ppStep is one line of ppTrain's step log.
type ppStep struct {
	step       int
	generation uint64
	at         time.Time
}

// readSteps reads ppTrain's step log: "step generation unix-nanoseconds"
// per line.
func readSteps(t *testing.T, path string) []ppStep {
	t.Helper()
	b, err := os.ReadFile(path)
	must.NoError(t, err)
	var out []ppStep
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		must.SliceLen(t, 3, f, must.Sprintf("step line %q", line))
		step, err1 := strconv.Atoi(f[0])
		gen, err2 := strconv.ParseUint(f[1], 10, 64)
		ns, err3 := strconv.ParseInt(f[2], 10, 64)
		must.NoError(t, err1)
		must.NoError(t, err2)
		must.NoError(t, err3)
		out = append(out, ppStep{step: step, generation: gen, at: time.Unix(0, ns)})
	}
	return out
}

// checkEveryStepOnce fails unless the steps are every step of ppTrain's
// run exactly once, in order.
func checkEveryStepOnce(t *testing.T, steps []ppStep) {
	t.Helper()
	must.SliceLen(t, ppEpochs*ppBatches, steps, must.Sprint("some steps ran twice or never"))
	for i, s := range steps {
		must.Eq(t, i, s.step)
	}
}

// ppPause holds rank 0, and with it the gang at its next collective, after
// a step while the test acts on the workers: when PP_PAUSE_DIR holds
// "pause-<generation>-<step>" (holdAt), until it also holds
// "go-<generation>-<step>" (a minute at most). The test so acts at a known
// step however the machine schedules it.
func ppPause(ctx context.Context, gen uint64, step int) {
	dir := os.Getenv("PP_PAUSE_DIR")
	name := fmt.Sprintf("%d-%d", gen, step)
	if _, err := os.Stat(filepath.Join(dir, "pause-"+name)); dir == "" || err != nil {
		return
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; {
		if _, err := os.Stat(filepath.Join(dir, "go-"+name)); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// holdAt makes ppPause hold the gang after step of generation gen. The
// returned held waits (a minute at most) until rank 0 logged that step and
// is held; release lets it go on.
func holdAt(dir, stepsFile string, gen uint64, step int) (held func() error, release func()) {
	name := fmt.Sprintf("%d-%d", gen, step)
	os.WriteFile(filepath.Join(dir, "pause-"+name), nil, 0o644)
	line := []byte(fmt.Sprintf("\n%d %d ", step, gen))
	held = func() error {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			if b, _ := os.ReadFile(stepsFile); bytes.Contains(append([]byte("\n"), b...), line) {
				return nil
			}
			time.Sleep(5 * time.Millisecond)
		}
		return fmt.Errorf("rank 0 did not reach step %d of generation %d", step, gen)
	}
	return held, func() { os.WriteFile(filepath.Join(dir, "go-"+name), nil, 0o644) }
}

// pidsByGeneration reads ppTrain's PP_PID_DIR: for each generation, the
// pid of each rank.
func pidsByGeneration(dir string) (map[uint64]map[int]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[uint64]map[int]int{}
	for _, e := range entries {
		var gen uint64
		var pid, rank int
		if _, err := fmt.Sscanf(e.Name(), "g%d-%d", &gen, &pid); err != nil {
			return nil, fmt.Errorf("pid file %q: %w", e.Name(), err)
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if rank, err = strconv.Atoi(string(b)); err != nil {
			continue // being written
		}
		if out[gen] == nil {
			out[gen] = map[int]int{}
		}
		out[gen][rank] = pid
	}
	return out, nil
}

// TestOneWorkerStopIsNotRunStop: a SIGTERM to one worker of four (Nomad's
// alloc stop, a node drain) stops that worker only. The gang checkpoints
// together at the next step boundary, the stopped worker exits as stopped
// and is replaced, and the others stay in their processes and go on with
// the replacement from that checkpoint. No failure budget is spent (it is
// 0 here), no step is lost or repeated, and the run ends with the
// parameters of a run that was never stopped.
func TestOneWorkerStopIsNotRunStop(t *testing.T) {
	for _, rank := range []int{1, 0} { // rank 0 holds the run's storage
		t.Run("rank"+strconv.Itoa(rank), func(t *testing.T) { testOneWorkerStop(t, rank) })
	}
}

func testOneWorkerStop(t *testing.T, rank int) {
	const n = 4 // ppTrain's batches split evenly
	stepsFile := os.Getenv("PP_STEPS")
	if stepsFile == "" {
		stepsFile = filepath.Join(t.TempDir(), "steps")
		t.Setenv("PP_STEPS", stepsFile)
	}
	pidDir := sharedDir(t, "PP_PID_DIR")
	pauseDir := sharedDir(t, "PP_PAUSE_DIR")
	storageDir := t.TempDir()
	type stop struct {
		at  time.Time
		err error
	}
	stopped := make(chan stop, 1)
	if !workerenv.IsWorker() { // only the launching test process stops a worker
		held, release := holdAt(pauseDir, stepsFile, 1, ppBatches+3) // mid-epoch 1
		go func() {
			defer release()
			if err := held(); err != nil {
				stopped <- stop{err: err}
				return
			}
			pids, err := pidsByGeneration(pidDir)
			if err == nil && pids[1][rank] == 0 {
				err = fmt.Errorf("no pid of rank %d in generation 1: %v", rank, pids)
			}
			if err != nil {
				stopped <- stop{err: err}
				return
			}
			at := time.Now()
			stopped <- stop{at: at, err: syscall.Kill(pids[1][rank], syscall.SIGTERM)}
		}()
	}
	res, out, err := fit(t, ppTrain, n, trainer.Run{Name: "one-stopped", StoragePath: storageDir,
		Failure: trainer.FailureConfig{MaxFailures: 0}}, nil)
	must.NoError(t, err, must.Sprint(out))
	stopAt := <-stopped
	must.NoError(t, stopAt.err)

	// The stopped worker alone exited, as stopped, and was replaced; no
	// failure was counted.
	must.SliceEmpty(t, res.Recovered, must.Sprint(out))
	must.SliceLen(t, 1, res.Replaced, must.Sprint(out))
	must.Eq(t, rank, res.Replaced[0].Rank)
	must.Eq(t, trainer.ExitStopped, res.Replaced[0].ExitCode)
	// The survivors trained on in the same processes, in one more
	// generation.
	pids, err := pidsByGeneration(pidDir)
	must.NoError(t, err)
	must.MapLen(t, 2, pids, must.Sprintf("generations: %v", pids))
	for r := range n {
		if r == rank {
			must.NotEq(t, pids[1][r], pids[2][r], must.Sprint("the stopped worker was not replaced"))
			continue
		}
		must.Eq(t, pids[1][r], pids[2][r], must.Sprintf("rank %d's process exited", r))
	}

	steps := readSteps(t, stepsFile)
	checkEveryStepOnce(t, steps)
	i := slices.IndexFunc(steps, func(s ppStep) bool { return s.generation == 2 })
	must.Positive(t, i)
	t.Logf("from the stop of rank %d to the gang's next step: %v (step %d)", rank, steps[i].at.Sub(stopAt.at), steps[i].step)

	st, err := storage.OpenReadOnly(storageDir, "one-stopped", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.SliceLen(t, ppEpochs+1, recs) // one report per epoch, one at the stop
	for j, r := range recs {
		must.Eq(t, int64(j+1), r.Step, must.Sprint("a report was lost or repeated"))
	}

	t.Setenv("PP_STEPS", filepath.Join(t.TempDir(), "clean-steps"))
	t.Setenv("PP_PID_DIR", t.TempDir())
	t.Setenv("PP_PAUSE_DIR", t.TempDir()) // no pauses
	clean, outs, err := fit(t, ppTrain, n, trainer.Run{Name: "clean", StoragePath: storageDir}, nil)
	must.NoError(t, err, must.Sprint(outs))
	want, _ := os.ReadFile(filepath.Join(clean.Checkpoint.Path(), "model.bin"))
	got, _ := os.ReadFile(filepath.Join(res.Checkpoint.Path(), "model.bin"))
	must.True(t, len(want) > 0 && bytes.Equal(want, got), must.Sprint("parameters after the stop differ from an uninterrupted run"))
}

// TestWholeStopStopsEveryWorker: when every worker is asked to stop (the
// whole job is stopped; here the launcher's Ctrl-C), all of them exit as
// stopped and none is replaced: the run ends as stopped, at a checkpoint,
// without starting another generation.
func TestWholeStopStopsEveryWorker(t *testing.T) {
	const n = 4 // ppTrain's batches split evenly
	stepsFile := os.Getenv("PP_STEPS")
	if stepsFile == "" {
		stepsFile = filepath.Join(t.TempDir(), "steps")
		t.Setenv("PP_STEPS", stepsFile)
	}
	pauseDir := sharedDir(t, "PP_PAUSE_DIR")
	storageDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !workerenv.IsWorker() {
		held, release := holdAt(pauseDir, stepsFile, 1, ppBatches+3)
		go func() {
			defer release()
			if held() == nil {
				cancel() // SIGTERM to every worker
			}
		}()
	}
	tr := trainer.New(ppTrain, trainer.Scaling{NumWorkers: n}, trainer.Run{Name: "all-stopped", StoragePath: storageDir,
		Failure: trainer.FailureConfig{MaxFailures: -1}}, nil)
	tr.Args = []string{"-test.run=^" + t.Name() + "$"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	res, err := tr.Fit(ctx)
	must.ErrorIs(t, err, trainer.ErrStopped, must.Sprint(out.String()))
	must.SliceLen(t, n, res.Errors, must.Sprint(out.String()))
	for _, e := range res.Errors {
		must.Eq(t, trainer.ExitStopped, e.ExitCode, must.Sprintf("rank %d", e.Rank))
	}
	must.SliceEmpty(t, res.Replaced)
	must.SliceEmpty(t, res.Recovered)
	steps := readSteps(t, stepsFile)
	for _, s := range steps {
		must.Eq(t, 1, s.generation, must.Sprintf("step %d ran in another generation", s.step))
	}
	// The last step reached is checkpointed: a new run resumes after it.
	must.NotNil(t, res.Checkpoint)
	last := res.Metrics
	epoch, batch := int(last["epoch"].(float64)), int(last["batch"].(float64))
	must.Eq(t, len(steps), epoch*ppBatches+batch, must.Sprintf("stopped at epoch %d batch %d after %d steps", epoch, batch, len(steps)))
}

// TestStopIsNoFailureForTheBudget: a stop of one worker, then a real
// failure (a SIGKILL), fit in a failure budget of one: the workers and the
// launcher both leave the generation that ended in the agreed stop out of
// the count.
func TestStopIsNoFailureForTheBudget(t *testing.T) {
	const n = 4
	stepsFile := os.Getenv("PP_STEPS")
	if stepsFile == "" {
		stepsFile = filepath.Join(t.TempDir(), "steps")
		t.Setenv("PP_STEPS", stepsFile)
	}
	pidDir := sharedDir(t, "PP_PID_DIR")
	pauseDir := sharedDir(t, "PP_PAUSE_DIR")
	done := make(chan error, 1)
	if !workerenv.IsWorker() {
		// signal sends sig to rank's process of generation gen after
		// step of that generation.
		type hold struct {
			held    func() error
			release func()
		}
		signal := func(h hold, gen uint64, rank int, sig syscall.Signal) error {
			defer h.release()
			if err := h.held(); err != nil {
				return err
			}
			pids, err := pidsByGeneration(pidDir)
			if err != nil {
				return err
			}
			return syscall.Kill(pids[gen][rank], sig)
		}
		var first, second hold
		first.held, first.release = holdAt(pauseDir, stepsFile, 1, ppBatches+3)
		second.held, second.release = holdAt(pauseDir, stepsFile, 2, 3*ppBatches+3)
		go func() {
			err := signal(first, 1, 1, syscall.SIGTERM)
			if err == nil {
				err = signal(second, 2, 2, syscall.SIGKILL)
			}
			second.release()
			done <- err
		}()
	}
	res, out, err := fit(t, ppTrain, n, trainer.Run{Name: "budget-stop", StoragePath: t.TempDir(),
		Failure: trainer.FailureConfig{MaxFailures: 1}}, nil)
	must.NoError(t, err, must.Sprint(out))
	must.NoError(t, <-done)
	must.SliceLen(t, 1, res.Replaced, must.Sprint(out))
	must.SliceLen(t, 1, res.Recovered, must.Sprint(out))
	must.Eq(t, "killed by SIGKILL", res.Recovered[0].Message)
}
