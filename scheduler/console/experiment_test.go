package console

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer"
)

// status and list show the experiments under a storage path, from the
// state their tuner wrote: status of an experiment's directory prints its
// trial table and best trial, and list adds a table of experiments after
// the runs (alone when there are no runs).
func TestExperimentStatusAndList(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fn := func(ctx context.Context, tr *tune.Trial) error {
		var cfg struct{ LR float64 }
		if err := tr.DecodeConfig(&cfg); err != nil {
			return err
		}
		for i := range 2 {
			if err := tr.Report(ctx, trainer.Metrics{"loss": cfg.LR + 1/float64(i+1)}, ""); err != nil {
				return err
			}
		}
		return nil
	}
	space := map[string]any{"lr": tune.GridSearch(0.3, 0.1, 0.2)}
	grid, err := tune.New(&tune.InProcess{Fn: fn}, space,
		tune.Config{Name: "exp", StoragePath: dir, Metric: "loss", Mode: tune.ModeMin}).Fit(ctx)
	must.NoError(t, err)
	best, err := grid.Best("", "")
	must.NoError(t, err)
	must.EqOp(t, "trial_0001", best.ID)

	var b bytes.Buffer
	must.NoError(t, PrintLocalStatus(ctx, &b, filepath.Join(dir, "exp")))
	must.StrContains(t, b.String(), "experiment exp: kept at "+filepath.Join(dir, "exp")+", state of ")
	must.StrContains(t, b.String(), "== exp: 3 trials (3 TERMINATED)\n")
	must.RegexMatch(t, regexp.MustCompile(`(?m)^trial_0001\s+TERMINATED\s+0\.1\s+2\s+\S+\s+0\.6$`), b.String())
	must.StrContains(t, b.String(), "best trial trial_0001: loss 0.6, config lr=0.1\n")
	must.StrContains(t, b.String(), "nomad-train status "+filepath.Join(dir, "exp", "trial_0001")+"\n")

	rows := regexp.MustCompile(`(?m)^EXPERIMENT\s+TRIALS\s+STATUS\s+BEST\s+UPDATED\nexp\s+3\s+3 TERMINATED\s+trial_0001 loss=0\.6\s+\d{4}-`)
	b.Reset()
	must.NoError(t, PrintLocalRuns(ctx, &b, dir))
	must.RegexMatch(t, regexp.MustCompile(`^EXPERIMENT`), b.String(), must.Sprint("no empty table of runs"))
	must.RegexMatch(t, rows, b.String())

	// A run beside it (a trial's run copied out) is listed first.
	must.NoError(t, os.CopyFS(filepath.Join(dir, "solo"), os.DirFS(filepath.Join(dir, "exp", "trial_0000"))))
	b.Reset()
	must.NoError(t, PrintLocalRuns(ctx, &b, dir))
	must.RegexMatch(t, regexp.MustCompile(`^RUN\s+STATUS\s+STEP\s+RESTARTS\s+UPDATED\nsolo\s+-\s+2\s+-\s+\S+ \S+\n\nEXPERIMENT`), b.String())
	must.RegexMatch(t, rows, b.String())

	// Neither a run nor an experiment: the error says what it looked for.
	must.NoError(t, os.Mkdir(filepath.Join(dir, "empty"), 0o755))
	err = PrintLocalStatus(ctx, &b, filepath.Join(dir, "empty"))
	must.ErrorIs(t, err, ErrNoLocalRun)
	must.StrContains(t, err.Error(), "no experiment_state.json")
}
