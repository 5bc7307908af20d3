package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// LocalRun is how `run` runs a spec on this machine.
type LocalRun struct {
	// Options are the launcher's; RunLocal sets their output.
	Options        launch.Options
	Stdout, Stderr io.Writer
	// Live, on a terminal, shows a progress bar under the workers' output
	// when the config gives epochs or steps; nil prints the output alone.
	Live *Live
	// LiveStderr sends the launcher's and workers' stderr through Live
	// too: stderr is the same terminal, and a line written past Live would
	// land on the bar.
	LiveStderr bool
	// BarEvery is how often the bar is redrawn (default 500ms).
	BarEvery time.Duration
}

// RunLocal runs the spec on this machine: it says what changed since the
// run's last launch, launches its workers, and prints its result and
// summary. It returns the exit code: 0 done, 1 failed, 130 stopped.
func RunLocal(ctx context.Context, spec *trainspec.Spec, l LocalRun) int {
	stdout, stderr := l.Stdout, l.Stderr
	opts := l.Options
	opts.Stdout, opts.Stderr = stdout, stderr
	// Through the bar's writer when it draws one: it clears the bar's line
	// first (printed straight to stdout, the line ran into the bar).
	opts.OnMetrics = func(urls []string) { PrintMetricsURLs(opts.Stdout, urls) }
	fmt.Fprintf(stdout, "==> run %q: %s on this machine, storage %s\n",
		spec.Name, spec.Scaling.Workers(), storageLocation(spec))
	dir := launch.RunDir(spec.Run.StoragePath, spec.Name)
	sopt := storage.WithStorageOptions(spec.Run.Storage.Options())
	rec, hadRec := launch.ReadLastRun(ctx, spec.Run.StoragePath, spec.Name, sopt)
	note := launch.ConfigChange(launch.ReadLastConfig(ctx, spec.Run.StoragePath, spec.Name, sopt), spec.ConfigJSON)
	wnote := launch.WorkersChange(rec, hadRec, spec.Scaling.NumWorkers)
	if hadRec && rec.Complete && note == "" && wnote == "" {
		fmt.Fprintf(stdout, "==> run %q is complete: nothing to train (run with -fresh to start it over)\n", spec.Name)
		return 0
	}
	for _, n := range []string{note, wnote} {
		if n != "" {
			fmt.Fprintf(stdout, "    %s\n", n)
		}
	}
	reports := newReports(spec.Run.StoragePath, spec.Name, sopt)
	defer reports.Close()
	// Its first call binds an object store's reads for good: not to ctx,
	// which Ctrl-C ends before the summary reads the last report.
	before, _ := reports.Latest(context.WithoutCancel(ctx))
	start := time.Now()
	stopBar := func() {}
	if goal, ok := GoalOf(spec.ConfigJSON); ok && l.Live != nil {
		opts.Stdout = l.Live
		if stderr == stdout || l.LiveStderr {
			opts.Stderr = l.Live
		}
		stopBar = showBar(ctx, l, goal, spec, reports, dir, start)
	}
	out, err := launch.Launch(ctx, opts)
	stopBar()
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		return 1
	}
	// Best effort: they only feed the notes above.
	launch.WriteLastConfig(ctx, spec.Run.StoragePath, spec.Name, spec.ConfigJSON, sopt)
	launch.WriteLastRun(ctx, spec.Run.StoragePath, spec.Name, launch.LastRun{NumWorkers: spec.Scaling.NumWorkers}, sopt)
	res, err := trainer.LoadResult(spec.Run.StoragePath, spec.Name, opts.Checkpoint, out, sopt)
	// A failed run has no result to show (its error says why); a finished
	// one, or one every worker stopped at a checkpoint, shows where it is.
	if res != nil && (err == nil || errors.Is(err, trainer.ErrStopped)) {
		PrintResult(stdout, res)
	}
	var steps int64
	if final, ok := reports.Latest(context.WithoutCancel(ctx)); ok {
		steps = max(final.Step-before.Step, 0) // a run moved aside starts again from step 1
	}
	fmt.Fprint(stdout, localSummary(spec, out, res, steps, time.Since(start)).Render())
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "nomad-train run: stopped; run it again to resume from the latest checkpoint")
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		return 1
	}
	launch.WriteLastRun(context.WithoutCancel(ctx), spec.Run.StoragePath, spec.Name,
		launch.LastRun{NumWorkers: spec.Scaling.NumWorkers, Complete: true}, sopt)
	return 0
}

// storageLocation is where the run keeps its records, as the user named
// the storage.
func storageLocation(spec *trainspec.Spec) string {
	return storage.RunLocation(spec.Run.StoragePath, spec.Name)
}

// localSummary is a local run's Summary: steps are the reports made in
// this launch.
func localSummary(spec *trainspec.Spec, out *launch.Outcome, res *trainer.Result, steps int64, wall time.Duration) Summary {
	s := Summary{Kind: "run", Name: spec.Name, Wall: wall, Steps: steps,
		MaxFailures: spec.Run.Failure.MaxFailures, Storage: spec.Run.StoragePath, StorageOptions: spec.Run.Storage.Options()}
	if out != nil {
		// As the workers count them against max_failures, which also counts
		// a generation lost with no process replaced.
		s.Failures = out.FailuresUsed
		s.Restarts = s.Failures + len(out.Stopped)
	}
	if res != nil {
		s.Best, s.Score = best(res, spec.Run.Checkpoint.ScoreAttribute)
	}
	s.StartedFrom = startedFrom(spec, storage.WithStorageOptions(spec.Run.Storage.Options()))
	return s
}

// startedFrom is the checkpoint the spec's run started from, when it
// started from another run's, as the summary shows it.
func startedFrom(spec *trainspec.Spec, opts ...storage.Option) string {
	if spec.Run.Checkpoint.ResumeFrom == "" {
		return ""
	}
	if s, ok := launch.ReadStart(context.Background(), spec.Run.StoragePath, spec.Name, opts...); ok {
		return s.String()
	}
	return ""
}

// best is the result's best checkpoint and its score.
func best(res *trainer.Result, attr string) (path, score string) {
	if len(res.BestCheckpoints) == 0 {
		if res.Checkpoint != nil {
			return res.Checkpoint.Path(), ""
		}
		return "", ""
	}
	b := res.BestCheckpoints[0]
	if v, ok := b.Metrics[attr]; ok && attr != "" {
		score = fmt.Sprintf("%s=%v", attr, v)
	}
	return b.Checkpoint.Path(), score
}

// workers is "1 worker" or "n workers".
func workers(n int) string { return launch.Workers(n) }

func restarts(n int) string { return english.Count(n, "restart", "restarts") }

// PrintResult prints what a run left: its last metrics, its latest
// checkpoint, its metrics history.
func PrintResult(w io.Writer, r *trainer.Result) {
	fmt.Fprintln(w, "==> result")
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	for _, k := range slices.Sorted(maps.Keys(r.Metrics)) {
		fmt.Fprintf(tw, "    %s\t%v\n", k, r.Metrics[k])
	}
	if r.Checkpoint != nil {
		fmt.Fprintf(tw, "    checkpoint\t%s\n", r.Checkpoint.Path())
	}
	fmt.Fprintf(tw, "    metrics\t%s\n", r.MetricsPath)
	tw.Flush()
}

// LocalOptions are the launcher's settings for the spec: its run, and
// what only a local run has (the rejoin timeout).
func LocalOptions(spec *trainspec.Spec) launch.Options {
	return launch.Options{Run: spec.RunSpec(), Dir: spec.Dir(), RejoinTimeout: spec.Rendezvous.RejoinTimeout}
}

// StartFresh moves the spec's run directory aside to <dir>.old-<time> so
// that the run starts over; it never deletes a user's checkpoints. It
// refuses while the run is going (its launcher alive, or a worker holding
// the run's writer lock): that run's workers would go on writing by path
// into the fresh run. It says where the old run went, or nothing when
// there was none.
func StartFresh(spec *trainspec.Spec, now time.Time, stdout io.Writer) error {
	dir := launch.RunDir(spec.Run.StoragePath, spec.Name)
	if dir == "" || storage.IsObjectPath(spec.Run.StoragePath) {
		return fmt.Errorf("-fresh needs a local storage path, not %q: remove the run's objects yourself", spec.Run.StoragePath)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil // nothing to move
	}
	if st, err := launch.ReadState(dir); err == nil && st.Phase == launch.PhaseRunning {
		return fmt.Errorf("-fresh: run %s is still going (its launcher, pid %d on %s); stop it first", spec.Name, st.PID, st.Host)
	}
	w, err := storage.Open(spec.Run.StoragePath, spec.Name, storage.Policy{})
	if errors.Is(err, storage.ErrLocked) {
		return fmt.Errorf("-fresh: a worker of run %s still writes to it (%w); stop it first", spec.Name, err)
	}
	if err != nil {
		return err
	}
	defer w.Close() // the lock moves with the directory
	return moveAside(dir, "run", now, stdout)
}

// moveAside moves dir aside (launch.MoveAside) and says where the
// previous what (run, experiment) went; nothing when there was none.
func moveAside(dir, what string, now time.Time, stdout io.Writer) error {
	aside, err := launch.MoveAside(dir, now)
	if err != nil || aside == "" {
		return err
	}
	if abs, err := filepath.Abs(aside); err == nil {
		aside = abs
	}
	fmt.Fprintf(stdout, "==> starting afresh: the previous %s moved to %s\n", what, aside)
	return nil
}
