package tune

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
)

// With fail_fast, the first trial that fails beyond its max_failures ends
// the experiment: the trial running beside it is stopped unfinished, the
// rest never start, and Fit says which trial failed and why. The next Fit
// runs them all, the failed one again.
func TestFailFast(t *testing.T) {
	dir := t.TempDir()
	var broken atomic.Bool
	broken.Store(true)
	fn := func(ctx context.Context, tr *Trial) error {
		if err := tr.Report(ctx, trainer.Metrics{"loss": 1.0}, ""); err != nil {
			return err
		}
		if tr.ID() == "trial_0001" && broken.Load() {
			return errors.New("boom")
		}
		if tr.ID() == "trial_0000" && broken.Load() {
			<-ctx.Done() // still running when trial_0001 fails
			return ctx.Err()
		}
		return nil
	}
	var progress bytes.Buffer
	cfg := Config{Name: "ff", StoragePath: dir, NumSamples: 6, MaxConcurrentTrials: 2, Metric: "loss", Mode: ModeMin,
		FailFast: true, Progress: &progress, Seed: 1}
	space := map[string]any{"lr": Uniform(0, 1)}
	g, err := New(&InProcess{Fn: fn}, space, cfg).Fit(context.Background())
	var tf *TrialFailedError
	must.True(t, errors.As(err, &tf), must.Sprint(err))
	must.EqOp(t, "trial_0001", tf.Trial)
	must.StrContains(t, err.Error(), "trial_0001 failed and fail_fast is set: boom")
	must.StrContains(t, progress.String(), "== ff: stopping: trial_0001 failed and fail_fast is set: boom")
	var statuses []string
	for _, tr := range g.Trials {
		statuses = append(statuses, tr.Status)
	}
	must.Eq(t, []string{StatusPending, StatusError, StatusPending, StatusPending, StatusPending, StatusPending}, statuses)
	must.EqOp(t, 1, g.Trials[0].Iterations, must.Sprint("stopped unfinished, with its report"))
	for _, tr := range g.Trials[2:] {
		must.EqOp(t, 0, tr.Iterations, must.Sprint(tr.ID, " started"))
	}

	broken.Store(false)
	g, err = New(&InProcess{Fn: fn}, space, cfg).Fit(context.Background())
	must.NoError(t, err)
	for _, tr := range g.Trials {
		must.EqOp(t, StatusTerminated, tr.Status, must.Sprint(tr.ID))
	}
}

// A trial that fails within its max_failures and then succeeds does not
// set fail_fast off.
func TestFailFastWaitsForTheFailureBudget(t *testing.T) {
	var fails atomic.Int64
	fn := func(ctx context.Context, tr *Trial) error {
		if tr.ID() == "trial_0000" && fails.Add(1) == 1 {
			return errors.New("transient")
		}
		return tr.Report(ctx, trainer.Metrics{"loss": 1.0}, "")
	}
	g, err := New(&InProcess{Fn: fn}, map[string]any{"lr": Uniform(0, 1)}, Config{Name: "ff", StoragePath: t.TempDir(),
		NumSamples: 3, MaxFailures: 1, FailFast: true}).Fit(context.Background())
	must.NoError(t, err)
	for _, tr := range g.Trials {
		must.EqOp(t, StatusTerminated, tr.Status, must.Sprint(tr.ID))
	}
}
