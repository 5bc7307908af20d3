package tune

import (
	"bytes"
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/examples/quickstart"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// asWorker runs fn and exits when this test binary was started as a worker
// (the helper-process idiom): each process test re-executes itself.
func asWorker(fn trainer.TrainFunc) {
	if workerenv.IsWorker() {
		os.Exit(trainer.RunWorker(context.Background(), fn))
	}
}

// quickstartSpace tunes the quickstart's learning rate and batch size.
func quickstartSpace() map[string]any {
	return map[string]any{
		"lr":         LogUniform(1e-3, 0.1),
		"batch_size": Choice(16, 32, 64),
		"epochs":     9,
		"samples":    4000,
	}
}

// A local tune of the quickstart with 8 samples on worker processes: ASHA
// finds a config better than the median random trial (the trials FIFO runs
// to the end) and spends fewer epochs than FIFO on the same 8 configs.
func TestQuickstartASHAAgainstFIFO(t *testing.T) {
	asWorker(quickstart.Train)
	t.Setenv("GORACE", "atexit_sleep_ms=0") // workers under -race exit at once
	run := func(name string, sched SchedulerConfig) *ResultGrid {
		b := NewProcesses(quickstart.Train, 1)
		b.Args = []string{"-test.run=^TestQuickstartASHAAgainstFIFO$"}
		var out bytes.Buffer
		b.Stdout, b.Stderr = &out, &out
		b.StopGrace = 200 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		g, err := New(b, quickstartSpace(), Config{Name: name, StoragePath: t.TempDir(), NumSamples: 8,
			MaxConcurrentTrials: 2, Metric: "loss", Mode: ModeMin, Seed: 11, Scheduler: sched,
			PollInterval: 10 * time.Millisecond, Checkpoint: workerenv.CheckpointPolicy{NumToKeep: 1}}).Fit(ctx)
		must.NoError(t, err, must.Sprint(out.String()))
		return g
	}
	fifo := run("fifo", SchedulerConfig{})
	asha := run("asha", SchedulerConfig{Type: SchedulerASHA, MaxT: 9, GracePeriod: 1, ReductionFactor: 3})

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
	must.Less(t, fifo.TotalIterations(), asha.TotalIterations())
	must.NotEq(t, "", best.BestCheckpoint)
	must.DirExists(t, best.BestCheckpoint)
}
