package tune

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/examples/quickstart"
	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// asWorker runs fn and exits when this test binary was started as a worker
// (the helper-process idiom): each process test re-executes itself.
func asWorker(fn trainer.TrainFunc) {
	if workerenv.IsWorker() {
		os.Exit(RunWorker(context.Background(), fn))
	}
}

// quickstartSpace tunes the quickstart's learning rate and batch size.
func quickstartSpace() map[string]any {
	return map[string]any{
		"lr":         LogUniform(1e-3, 0.1),
		"batch_size": Choice(16, 32, 64),
		"epochs":     9,
		"samples":    512,
	}
}

// A local tune of the quickstart with 8 samples on worker processes: ASHA
// finds a config better than the median random trial (the trials FIFO runs
// to the end) and spends fewer epochs than FIFO on the same 8 configs.
func TestQuickstartASHAAgainstFIFO(t *testing.T) {
	asWorker(quickstart.Train)
	t.Setenv("GORACE", "atexit_sleep_ms=0") // workers under -race exit at once
	run := func(name string, sched SchedulerSettings) *ResultGrid {
		b := NewProcesses(quickstart.Train, 1)
		b.Args = []string{"-test.run=^TestQuickstartASHAAgainstFIFO$"}
		var out bytes.Buffer
		b.Stdout, b.Stderr = &out, &out
		b.StopGrace = 50 * time.Millisecond // the quickstart ignores stop requests: kill soon
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		g, err := New(b, quickstartSpace(), Config{Name: name, StoragePath: t.TempDir(), NumSamples: 8,
			MaxConcurrentTrials: 2, Metric: "loss", Mode: ModeMin, Seed: 11, Scheduler: sched,
			PollInterval: 10 * time.Millisecond, Checkpoint: workerenv.CheckpointPolicy{NumToKeep: 1}}).Fit(ctx)
		must.NoError(t, err, must.Sprint(out.String()))
		return g
	}
	fifo := run("fifo", FIFO{})
	asha := run("asha", ASHASettings{MaxT: 9, GracePeriod: 1, ReductionFactor: 3})

	var finals []float64
	for _, tr := range fifo.Trials {
		must.EqOp(t, StatusTerminated, tr.Status, must.Sprint(tr.Reason))
		must.EqOp(t, 9, tr.Iterations)
		finals = append(finals, tr.Metrics["loss"].(float64))
	}
	sort.Float64s(finals)
	median := (finals[3] + finals[4]) / 2
	best, err := asha.Best("loss", ModeMin)
	must.NoError(t, err)
	bestLoss := best.Metrics["loss"].(float64)
	for _, tr := range asha.Trials {
		t.Logf("asha %s %v iters=%d loss=%v %s", tr.ID, tr.Params, tr.Iterations, tr.Metrics["loss"], tr.Reason)
	}
	t.Logf("FIFO: %d epochs, median final loss %.5f; ASHA: %d epochs, best %s loss %.5f",
		fifo.TotalIterations(), median, asha.TotalIterations(), best.ID, bestLoss)
	must.Less(t, median, bestLoss)
	// Not only a trial cut at a rung that ran on a little before its stop
	// landed: a trial ASHA promoted to max_t beats the median too.
	promoted := math.Inf(1)
	for _, tr := range asha.Trials {
		if tr.Iterations == 9 {
			promoted = min(promoted, tr.Metrics["loss"].(float64))
		}
	}
	must.Less(t, median, promoted)
	must.Less(t, fifo.TotalIterations(), asha.TotalIterations())
	must.NotEq(t, "", best.BestCheckpoint)
	must.DirExists(t, best.BestCheckpoint)
}

// slowConfig is slowTrain's config.
type slowConfig struct {
	LR      float64 `json:"lr"`
	Epochs  int     `json:"epochs"`
	SleepMS int     `json:"sleep_ms"`
}

// slowTrain is a training function whose epochs take SleepMS: it
// checkpoints its epoch every epoch and resumes after the one in its
// checkpoint, saying so on stdout. It honours a stop request
// (ShouldCheckpoint) between epochs.
func slowTrain(ctx context.Context, s *trainer.Session) error {
	var cfg slowConfig
	if err := s.DecodeConfig(&cfg); err != nil {
		return err
	}
	start := 0
	if ck := s.GetCheckpoint(); ck != nil {
		b, err := os.ReadFile(filepath.Join(ck.Path(), "epoch"))
		if err != nil {
			return err
		}
		last, err := strconv.Atoi(string(b))
		if err != nil {
			return err
		}
		start = last + 1
		fmt.Printf("resuming at epoch %d\n", start)
	}
	for epoch := start; epoch < cfg.Epochs; epoch++ {
		// Asked to stop (the tuner stopped the trial): the last epoch's
		// checkpoint is committed, so return at once.
		if stop, err := s.ShouldCheckpoint(ctx); err != nil || stop {
			return err
		}
		select {
		case <-time.After(time.Duration(cfg.SleepMS) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		dir, err := s.NewCheckpointDir()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "epoch"), []byte(strconv.Itoa(epoch)), 0o644); err != nil {
			return err
		}
		loss := cfg.LR / float64(epoch+1)
		if err := s.Report(ctx, trainer.Metrics{"loss": loss, "epoch": epoch}, trainer.CheckpointFromDirectory(dir)); err != nil {
			return err
		}
	}
	return nil
}

const killHelperEnv = "TUNE_TEST_KILL_DIR"

// The tuner process is killed with SIGKILL mid-experiment and started
// again: trials that had finished are kept as they were (their files are
// untouched), the interrupted ones continue from their checkpoints, and no
// epoch is reported twice.
func TestKillTunerResumes(t *testing.T) {
	asWorker(slowTrain)
	if dir := os.Getenv(killHelperEnv); dir != "" {
		b := NewProcesses(slowTrain, 1)
		b.Args = []string{"-test.run=^TestKillTunerResumes$"}
		b.Stdout, b.Stderr = os.Stdout, os.Stderr
		_, err := New(b, map[string]any{"lr": GridSearch(0.1, 0.2, 0.3, 0.4), "epochs": 6, "sleep_ms": 120},
			Config{Name: "exp", StoragePath: dir, MaxConcurrentTrials: 2, Metric: "loss", Mode: ModeMin,
				PollInterval: 20 * time.Millisecond}).Fit(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, "tuner:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir := t.TempDir()
	exp := filepath.Join(dir, "exp")
	tuner := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillTunerResumes$")
		cmd.Env = append(os.Environ(), killHelperEnv+"="+dir, "GORACE=atexit_sleep_ms=0")
		return cmd
	}
	out1, err := os.Create(filepath.Join(dir, "first.log"))
	must.NoError(t, err)
	defer out1.Close()
	first := tuner()
	first.Stdout, first.Stderr = out1, out1
	must.NoError(t, first.Start())
	// Kill it once a trial has finished and another is half-way.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			first.Process.Kill()
			first.Wait()
			b, _ := os.ReadFile(out1.Name())
			t.Fatalf("tuner never got half-way:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
		st, ok, err := LoadState(context.Background(), exp)
		if err != nil || !ok {
			continue
		}
		done, half := 0, 0
		for _, ts := range st.Trials {
			recs, _ := readTrial(exp, ts.ID)
			if ts.Status == StatusTerminated {
				done++
			} else if len(recs) >= 2 && len(recs) < 5 {
				half++
			}
		}
		if done >= 1 && half >= 1 {
			break
		}
	}
	must.NoError(t, first.Process.Kill())
	first.Wait()

	// Its workers died with it (Pdeathsig): no process writes the trials.
	time.Sleep(200 * time.Millisecond)
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(workerenv.StoragePath+"="+exp)) {
			t.Errorf("worker %s outlived the tuner", p)
		}
	}
	st, _, err := LoadState(context.Background(), exp)
	must.NoError(t, err)
	kept := map[string][]byte{}
	unfinished := map[string]int{} // the epoch each resumes at: after its newest committed checkpoint
	for _, ts := range st.Trials {
		b, _ := os.ReadFile(filepath.Join(exp, ts.ID, storage.ProgressFile))
		if ts.Status == StatusTerminated {
			kept[ts.ID] = b
			continue
		}
		// A checkpoint is committed once its directory has its manifest;
		// the kill may fall before its record is written (the next run
		// writes it), so the reports are not what is counted.
		manifests, _ := filepath.Glob(filepath.Join(exp, ts.ID, "checkpoint_*", storage.ManifestFile))
		for _, m := range manifests {
			n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(m)), "checkpoint_"))
			must.NoError(t, err)
			unfinished[ts.ID] = max(unfinished[ts.ID], n+1)
		}
	}
	must.MapNotEmpty(t, kept)
	t.Logf("killed with %d finished trials; unfinished trials resume at epochs %v", len(kept), unfinished)

	second := tuner()
	out2, err := second.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out2)))
	grid, err := LoadResultGrid(context.Background(), exp, "loss", ModeMin)
	must.NoError(t, err)
	for _, tr := range grid.Trials {
		must.EqOp(t, StatusTerminated, tr.Status, must.Sprint(tr.ID))
		recs, err := readTrial(exp, tr.ID)
		must.NoError(t, err)
		for i, r := range recs { // steps 1..6, each once
			must.EqOp(t, int64(i+1), r.Step, must.Sprint(tr.ID))
		}
		must.Len(t, 6, recs, must.Sprint(tr.ID))
		if b, ok := kept[tr.ID]; ok {
			now, _ := os.ReadFile(filepath.Join(exp, tr.ID, storage.ProgressFile))
			must.Eq(t, b, now, must.Sprint(tr.ID, " was rerun"))
			must.StrNotContains(t, string(out2), "["+tr.ID+"]")
		}
		if n := unfinished[tr.ID]; n > 0 {
			must.StrContains(t, string(out2), fmt.Sprintf("[%s] [rank 0] resuming at epoch %d", tr.ID, n))
		}
	}
}

// PBT on worker processes: the worst trial is stopped through its backend,
// gets a copy of the best trial's checkpoint as its own latest committed
// checkpoint, and its restarted worker resumes from it (GetCheckpoint) with
// the mutated config.
func TestPBTOnProcesses(t *testing.T) {
	asWorker(slowTrain)
	pbtOnProcesses(t, "^TestPBTOnProcesses$", t.TempDir(), workerenv.StorageOptions{})
}

// PBT with the trials on S3: a clone comes down to the tuner, checked
// against its manifest, and goes up into the recipient's run, whose
// restarted worker resumes from it as in a directory.
func TestPBTOnProcessesOnS3(t *testing.T) {
	asWorker(slowTrain)
	srv := s3test.Start(t)
	srv.SetKeysOnly(t)
	pbtOnProcesses(t, "^TestPBTOnProcessesOnS3$", "s3://"+srv.Bucket+"/exps",
		workerenv.StorageOptions{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true})
}

func pbtOnProcesses(t *testing.T, run, where string, so workerenv.StorageOptions) {
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	b := NewProcesses(slowTrain, 1)
	b.Args = []string{"-test.run=" + run}
	var out bytes.Buffer
	b.Stdout, b.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// lr 10 is the worst whatever the epoch (its loss 10/(epoch+1) stays
	// above 0.3/1 for 30 epochs), so it is in the bottom quantile at its
	// first decision that sees the others' results, however the trials
	// interleave. 30 epochs leave it time to be stopped for the clone
	// after that decision: the tuner reads a trial's reports up to a
	// second late on S3 under the race detector, and a trial of 10
	// epochs could end first.
	const epochs = 30
	g, err := New(b, map[string]any{"lr": GridSearch(0.1, 0.2, 0.3, 10), "epochs": epochs, "sleep_ms": 60},
		Config{Name: "pbt", StoragePath: where, StorageOptions: so, MaxConcurrentTrials: 4, Metric: "loss", Mode: ModeMin,
			Seed: 5, PollInterval: 10 * time.Millisecond,
			Scheduler: PBTSettings{PerturbationInterval: 3,
				HyperparamMutations: map[string]any{"lr": []any{0.1, 0.2, 0.3}}},
		}).Fit(ctx)
	must.NoError(t, err, must.Sprint(out.String()))
	opts := newTrialStore(g.Path, so).opts
	st, _, err := LoadState(context.Background(), g.Path, opts...)
	must.NoError(t, err)
	exploited := 0
	for _, ts := range st.Trials {
		must.EqOp(t, StatusTerminated, ts.Status, must.Sprint(ts.ID, ts.Reason))
		f, err := storage.Follow(context.Background(), g.Path, ts.ID, opts...)
		must.NoError(t, err)
		recs, _, err := f.NextRecords()
		f.Close()
		must.NoError(t, err)
		must.EqOp(t, int64(epochs), recs[len(recs)-1].Step)
		for i, x := range ts.Exploits {
			exploited++
			// The restart after the i-th clone resumes after the donor's epoch.
			must.StrContains(t, out.String(), fmt.Sprintf("[%s] [rank 0] resuming at epoch %d", ts.ID, int(x.Time)), must.Sprint(i))
		}
	}
	must.Positive(t, exploited, must.Sprint(out.String()))
	must.Positive(t, len(st.Trials[3].Exploits), must.Sprint(out.String()))
	must.NotEq(t, 10, st.Trials[3].Config["lr"]) // explored away from its own lr
}

// gatedTrain records its pid (pidDirEnv) and whether it was started ahead
// of its trial, then trains like synthTrain.
const pidDirEnv = "TUNE_TEST_PID_DIR"

func gatedTrain(ctx context.Context, s *trainer.Session) error {
	var cfg synthConfig
	if err := s.DecodeConfig(&cfg); err != nil {
		return err
	}
	gated := 0
	if os.Getenv(StartGateEnv) != "" {
		gated = 1
	}
	for epoch := range int64(cfg.Epochs) {
		if err := doWork(ctx, 10*time.Millisecond); err != nil {
			return err
		}
		if err := s.Report(ctx, trainer.Metrics{"loss": synthLoss(cfg.LR, epoch), "gated": gated}, nil); err != nil {
			return err
		}
	}
	return nil
}

// writePid leaves this worker's pid in the test's pid directory.
func writePid() {
	if dir := os.Getenv(pidDirEnv); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), nil, 0o644)
	}
}

// pidsGone fails the test for every recorded worker still alive.
func pidsGone(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must.NoError(t, err)
	for _, e := range ents {
		pid, _ := strconv.Atoi(e.Name())
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("worker %d is still running", pid)
		}
	}
	return len(ents)
}

// While the one slot is busy, the next trial's worker is started ahead and
// held at its gate; it trains once its trial runs. Workers started ahead of
// trials that never run are stopped when Fit ends.
func TestProcessesPreStart(t *testing.T) {
	writePid()
	asWorker(gatedTrain)
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	newBackend := func(pids string) *Processes {
		b := NewProcesses(gatedTrain, 1)
		b.Args = []string{"-test.run=^TestProcessesPreStart$"}
		b.Env = []string{pidDirEnv + "=" + pids}
		b.StopGrace = 100 * time.Millisecond
		return b
	}

	t.Run("held workers train when their trial runs", func(t *testing.T) {
		pids := t.TempDir()
		g, err := New(newBackend(pids), map[string]any{"lr": GridSearch(0.1, 0.01, 0.001), "epochs": 3},
			Config{Name: "pre", StoragePath: t.TempDir(), PollInterval: 5 * time.Millisecond}).Fit(context.Background())
		must.NoError(t, err)
		for i, tr := range g.Trials {
			must.EqOp(t, StatusTerminated, tr.Status, must.Sprint(tr.Reason))
			must.EqOp(t, float64(min(i, 1)), tr.Metrics["gated"].(float64), must.Sprintf("trial %s", tr.ID))
		}
		must.EqOp(t, 3, pidsGone(t, pids))
	})
	t.Run("held workers of trials that never run are stopped", func(t *testing.T) {
		pids := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		root := t.TempDir()
		go func() { // interrupt once trial_0000 trains and trial_0001's worker waits
			for ctx.Err() == nil {
				b, _ := os.ReadFile(filepath.Join(root, "pre", "trial_0000", "progress.jsonl"))
				ents, _ := os.ReadDir(pids)
				if len(b) > 0 && len(ents) >= 2 {
					cancel()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		_, err := New(newBackend(pids), map[string]any{"lr": GridSearch(0.1, 0.01, 0.001), "epochs": 100000},
			Config{Name: "pre", StoragePath: root, PollInterval: 5 * time.Millisecond}).Fit(ctx)
		must.ErrorIs(t, err, context.Canceled)
		must.EqOp(t, 2, pidsGone(t, pids))
	})
}

// A process trial's reports reach the scheduler as they land in its
// progress file (inotify), not at the next poll: with polling an hour
// apart, ASHA still stops the trial at max_t, which is its end: it is
// TERMINATED, not STOPPED.
func TestProcessesReportsWakeTheTuner(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("progress files are watched on Linux only")
	}
	asWorker(gatedTrain)
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	b := NewProcesses(gatedTrain, 1)
	b.Args = []string{"-test.run=^TestProcessesReportsWakeTheTuner$"}
	b.StopGrace = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := New(b, map[string]any{"lr": 0.01, "epochs": 100000}, Config{Name: "wake", StoragePath: t.TempDir(),
		Metric: "loss", Mode: ModeMin, PollInterval: time.Hour,
		Scheduler: ASHASettings{MaxT: 3, GracePeriod: 1}}).Fit(ctx)
	must.NoError(t, err)
	must.EqOp(t, StatusTerminated, g.Trials[0].Status)
	must.StrContains(t, g.Trials[0].Reason, "max_t")
}
