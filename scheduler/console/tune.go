package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// TuneRun is how `tune` runs an experiment.
type TuneRun struct {
	Stdout, Stderr io.Writer
	// Live, on a terminal, redraws the trial table in place; nil prints
	// it again every Interval.
	Live     *Live
	Interval time.Duration
	// Nomad, when set, runs each trial as its own job on the Nomad at
	// Address; else the trials run on this machine.
	Nomad              nomad.API
	Address, Namespace string
	WaitForCapacity    bool
	// Verbose shows local trials' worker output.
	Verbose bool
}

// RunTune runs the experiment, writes results.csv and results.json, and
// prints the best trial and the summary. It returns the exit code: 0, 1
// when the experiment failed or a trial failed beyond its max_failures,
// 130 when stopped.
func RunTune(ctx context.Context, x *tune.Experiment, o TuneRun) int {
	stdout, stderr := o.Stdout, o.Stderr
	cfg := x.Config
	cfg.Progress, cfg.ProgressInterval = stdout, o.Interval
	if o.Live != nil {
		cfg.Progress = o.Live
	}
	where := storage.RunLocation(cfg.StoragePath, cfg.Name)
	var backend tune.Backend
	if o.Nomad != nil {
		nj := &tune.NomadJobs{API: o.Nomad, Spec: x.Spec, Namespace: o.Namespace, NoWait: !o.WaitForCapacity}
		if c := nomad.EnvConsulKV(); c != nil {
			nj.KV = c
		}
		backend = nj
		fmt.Fprintf(stdout, "==> tune %q: trials as Nomad jobs (%s), storage %s\n", cfg.Name, o.Address, where)
	} else {
		// Trials start their workers as run does: a python3 command runs
		// under the external wrapper here too.
		proc, err := workerProcess(x.Spec)
		if err != nil {
			fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
			return 1
		}
		var out, errOut io.Writer
		if o.Verbose {
			out, errOut = stdout, stderr
			if o.Live != nil {
				out, errOut = o.Live, o.Live
			}
		}
		backend = x.LocalProcesses(proc, out, errOut)
		fmt.Fprintf(stdout, "==> tune %q: trials on this machine, storage %s\n", cfg.Name, where)
	}
	// The summary counts the reports of this invocation: a resumed
	// experiment's earlier ones are in its state.
	before := 0
	if st, ok, _ := tune.LoadState(ctx, where, storage.WithStorageOptions(x.Spec.Run.Storage.Options())); ok {
		for _, t := range st.Trials {
			before += t.Iterations
		}
	}
	start := time.Now()
	grid, err := tune.New(backend, x.Space, cfg).Fit(ctx)
	if o.Live != nil {
		o.Live.Finish(true) // the last table stays
	}
	failed := 0
	if grid != nil {
		if werr := grid.WriteFiles(context.WithoutCancel(ctx)); werr != nil {
			fmt.Fprintf(stderr, "nomad-train tune: %v\n", werr)
			return 1
		}
		failed = printExperiment(stdout, stderr, grid, cfg, x.Spec.Run.Storage.Options(), before, time.Since(start))
	}
	switch {
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "nomad-train tune: stopped; run it again to resume the unfinished trials")
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
	}
	if failed > 0 {
		// Like a failed run (and Ray's tune.run, which raises TuneError):
		// a script or CI job must not take an experiment with failed
		// trials for a good one.
		fmt.Fprintf(stderr, "nomad-train tune: %d of %d %s failed (see the table above)\n",
			failed, len(grid.Trials), english.Plural(len(grid.Trials), "trial", "trials"))
	}
	if err != nil || failed > 0 {
		return 1
	}
	return 0
}

// TuneFresh moves the experiment's directory aside to <dir>.old-<time>,
// so that tune starts it over; it never deletes a trial. It refuses while
// a tuner runs the experiment, and says where the old one went.
func TuneFresh(ctx context.Context, x *tune.Experiment, now time.Time, stdout io.Writer) error {
	root, name := x.Config.StoragePath, x.Config.Name
	if storage.IsObjectPath(root) {
		return fmt.Errorf("-fresh needs a local storage path, not %q: move the experiment's objects aside yourself, or give it another name", root)
	}
	where := storage.RunLocation(root, name)
	if _, err := os.Stat(where); errors.Is(err, fs.ErrNotExist) {
		return nil // nothing to move
	}
	lock, err := storage.OpenExperiment(ctx, where)
	if errors.Is(err, storage.ErrLocked) {
		return fmt.Errorf("-fresh: a tuner is running the experiment in %s; stop it first", where)
	}
	if err != nil {
		return err
	}
	defer lock.Close() // the flock moves with the directory
	return moveAside(where, "experiment", now, stdout)
}

// printExperiment prints an experiment's end: its failed trials, where
// its results are, its best trial and the summary, whose count of reports
// leaves out the before made by earlier invocations. It returns the
// number of failed trials.
func printExperiment(stdout, stderr io.Writer, grid *tune.ResultGrid, cfg tune.Config, so workerenv.StorageOptions, before int, wall time.Duration) int {
	for _, tr := range grid.Trials {
		if tr.Status == tune.StatusError {
			fmt.Fprintf(stderr, "nomad-train tune: %s failed: %s\n", tr.ID, tr.Reason)
		}
	}
	fmt.Fprintf(stdout, "==> results %s, %s\n", storage.RunLocation(grid.Path, tune.ResultFiles[0]), storage.RunLocation(grid.Path, tune.ResultFiles[1]))
	s := Summary{Kind: "experiment", Name: cfg.Name, Wall: wall, Unit: "trial reports",
		Steps: int64(max(grid.TotalIterations()-before, 0)), Trials: len(grid.Trials), FailedTrials: grid.NumErrors(),
		Storage: cfg.StoragePath, StorageOptions: so}
	if best, berr := grid.Best("", ""); berr == nil {
		fmt.Fprintf(stdout, "==> best trial %s: %s %v, config %s\n", best.ID, cfg.Metric, best.Metrics[cfg.Metric], tune.FormatConfig(best.Config))
		if best.BestCheckpoint != "" {
			fmt.Fprintf(stdout, "    checkpoint %s\n", best.BestCheckpoint)
		}
		s.Best = best.BestCheckpoint
		if v, ok := best.Metrics[cfg.Metric]; ok && s.Best != "" {
			s.Score = fmt.Sprintf("%s=%v, trial %s", cfg.Metric, v, best.ID)
		}
	}
	fmt.Fprint(stdout, s.Render())
	return grid.NumErrors()
}

// workerProcess is how a local worker of spec starts: this binary for a
// builtin or a program that needs the external wrapper (python3 train.py),
// the program itself for a Go trainer (workerenv.StartFor decides, as the
// driver's does on Nomad).
func workerProcess(spec *trainspec.Spec) (workerenv.Process, error) {
	exe, err := os.Executable()
	if err != nil {
		return workerenv.Process{}, fmt.Errorf("find own executable: %w", err)
	}
	return workerenv.StartFor(workerenv.Entrypoint{Builtin: spec.Entrypoint.Builtin,
		Command: spec.Entrypoint.Command, Args: spec.Entrypoint.Args}, exe, workerenv.SpeaksContract)
}

// LoadExperiment reads the experiment of the spec at path (LoadSpec,
// then tune.FromSpec), printing what is wrong to stderr.
func LoadExperiment(path string, l SpecLoad, stderr io.Writer) (*tune.Experiment, bool) {
	spec, _, ok := LoadSpec(path, l, stderr)
	if !ok {
		return nil, false
	}
	x, err := tune.FromSpec(spec)
	switch {
	case errors.Is(err, tune.ErrNoTuneBlock):
		fmt.Fprintf(stderr, "nomad-train tune: %s has no tune block; add one, or use `nomad-train run`\n", path)
		return nil, false
	case err != nil: // LoadSpec checked the settings: only a changed file gets here
		fmt.Fprintf(stderr, "nomad-train tune: %s: %v\n", path, err)
		return nil, false
	}
	return x, true
}
