package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

func init() {
	register("tune", "Tune hyperparameters: run trials of a spec's search space (locally unless a Nomad address is given)", tuneCmd)
}

// experiment is what a train.hcl spec with a tune block describes.
type experiment struct {
	spec       *trainspec.Spec
	env        []string
	numWorkers int
	space      map[string]any
	cfg        tune.Config
}

// loadExperiment reads a train.hcl spec with a tune block.
func loadExperiment(path string, sf *specFlags, forNomad bool, stderr io.Writer) (*experiment, bool) {
	spec, _, ok := loadSpec(path, sf, forNomad, stderr)
	if !ok {
		return nil, false
	}
	if spec.Tune == nil {
		fmt.Fprintf(stderr, "nomad-train tune: %s has no tune block; add one, or use `nomad-train run`\n", path)
		return nil, false
	}
	space, err := tune.ParseSpace(spec.ConfigJSON)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train tune: %s: config: %v\n", path, err)
		return nil, false
	}
	t := spec.Tune
	sched, err := tune.ParseScheduler(t.Scheduler.Type, t.Scheduler.SettingsJSON, t.Metric)
	if err != nil { // loadSpec checked it: only a changed file gets here
		fmt.Fprintf(stderr, "nomad-train tune: %s: scheduler: %v\n", path, err)
		return nil, false
	}
	search, err := tune.ParseSearcher(t.SearchAlg.Type, t.SearchAlg.SettingsJSON, t.Metric)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train tune: %s: search_alg: %v\n", path, err)
		return nil, false
	}
	x := &experiment{spec: spec, numWorkers: spec.Scaling.NumWorkers, space: space,
		cfg: tune.Config{Name: spec.Name, StoragePath: spec.Run.StoragePath,
			NumSamples: t.NumSamples, MaxConcurrentTrials: t.MaxConcurrentTrials,
			Metric: t.Metric, Mode: t.Mode, TimeAttr: t.TimeAttr, TimeBudget: t.TimeBudget,
			Searcher: t.Searcher, Seed: uint64(t.Seed), MaxFailures: t.MaxFailures, Scheduler: sched, Search: search,
			Checkpoint: workerenv.CheckpointPolicy{NumToKeep: spec.Run.Checkpoint.NumToKeep,
				ScoreAttribute: spec.Run.Checkpoint.ScoreAttribute, ScoreOrder: spec.Run.Checkpoint.ScoreOrder}}}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		x.env = append(x.env, k+"="+spec.Env[k])
	}
	trialsOnS3(spec, &x.cfg)
	return x, true
}

func tuneCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("tune", "tune [flags] train.hcl\n\n"+
		"Runs the trials of a spec's tune block on local\n"+
		"worker processes, or with -address (or NOMAD_ADDR) each as its own Nomad job\n"+
		"<name>-trial_NNNN; shows a live table, and writes results.csv and results.json\n"+
		"into the experiment directory. On Nomad, storage_path must be shared storage\n"+
		"mounted at the same path here and on the clients: the tuner reads the trials'\n"+
		"reports there. Running it again after a crash or Ctrl-C resumes the unfinished\n"+
		"trials (on Nomad, adopting trial jobs still running), and retries the failed\n"+
		"ones from their checkpoints. It exits with status 1 when a trial failed beyond\n"+
		"its max_failures.", stderr)
	interval := fs.Duration("progress", 0, "how often to print the trial table (default 5s)")
	verbose := fs.Bool("v", false, "show the workers' output and errors, each line prefixed with its trial and rank")
	var sf specFlags
	sf.register(fs)
	var cf clusterFlags // -address etc.: an address runs the trials on Nomad
	cf.register(fs)
	fs.BoolVar(&cf.waitForCapacity, "wait-for-capacity", false, "on Nomad, a trial waits until its whole gang fits instead of failing")
	cf.registerLocal(fs)
	path, code := parseArgs(fs, args, stderr)
	if code >= 0 {
		return code
	}
	if code := cf.resolveLocal(fs, stderr); code >= 0 {
		return code
	}
	x, ok := loadExperiment(path, &sf, cf.address != "", stderr)
	if !ok {
		return exitSpec
	}
	cfg := x.cfg
	cfg.Progress, cfg.ProgressInterval = stdout, *interval
	if cfg.StoragePath == "" {
		cfg.StoragePath = "./results"
	}
	var backend tune.Backend
	if cf.address != "" {
		c, err := cf.client()
		if err != nil {
			fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
			return 1
		}
		nj := &tune.NomadJobs{API: c, Spec: x.spec, Namespace: cf.namespace, WaitForCapacity: cf.waitForCapacity}
		_, nj.KV = consulKV()
		backend = nj
		fmt.Fprintf(stdout, "==> tune %q: trials as Nomad jobs (%s), storage %s\n", cfg.Name, cf.address, tuneStorage(cfg))
	} else {
		var code int
		if backend, code = localBackend(x, *verbose, stdout, stderr); code >= 0 {
			return code
		}
		fmt.Fprintf(stdout, "==> tune %q: trials on this machine, storage %s\n", cfg.Name, tuneStorage(cfg))
	}
	grid, err := tune.New(backend, x.space, cfg).Fit(ctx)
	failed := 0
	if grid != nil {
		if werr := writeGrid(grid); werr != nil {
			fmt.Fprintf(stderr, "nomad-train tune: %v\n", werr)
			return 1
		}
		for _, tr := range grid.Trials {
			if tr.Status == tune.StatusError {
				fmt.Fprintf(stderr, "nomad-train tune: %s failed: %s\n", tr.ID, tr.Reason)
			}
		}
		failed = grid.NumErrors()
		fmt.Fprintf(stdout, "==> results %s, %s\n", filepath.Join(grid.Path, "results.csv"), filepath.Join(grid.Path, "results.json"))
		if best, berr := grid.Best("", ""); berr == nil {
			fmt.Fprintf(stdout, "==> best trial %s: %s %v, config %s\n", best.ID, cfg.Metric, best.Metrics[cfg.Metric], tune.FormatConfig(best.Config))
			if best.BestCheckpoint != "" {
				fmt.Fprintf(stdout, "    checkpoint %s\n", best.BestCheckpoint)
			}
		}
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
			failed, len(grid.Trials), plural(len(grid.Trials), "trial", "trials"))
	}
	if err != nil || failed > 0 {
		return 1
	}
	return exitOK
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// localBackend places the trials as local worker processes; code is the
// exit code when it cannot (else -1).
func localBackend(x *experiment, verbose bool, stdout, stderr io.Writer) (_ tune.Backend, code int) {
	b := tune.NewProcesses(nil, x.numWorkers)
	// Trials start their workers as run does: a python3 command runs under
	// the external wrapper here too.
	proc, err := workerProcess(x.spec)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
		return nil, 1
	}
	b.Command, b.Args = proc.Path, proc.Args
	b.Env = append(append([]string{}, x.env...), proc.Env...)
	// Stopped trials' workers complain about their cancelled context;
	// failures are in the table and results.json, the rest only with -v.
	b.Stdout, b.Stderr = io.Discard, io.Discard
	if verbose {
		b.Stdout, b.Stderr = stdout, stderr
	}
	return b, -1
}

// writeGrid writes results.csv and results.json into the experiment
// directory.
func writeGrid(g *tune.ResultGrid) error {
	for name, write := range map[string]func(io.Writer) error{"results.csv": g.WriteCSV, "results.json": g.WriteJSON} {
		f, err := os.Create(filepath.Join(g.Path, name))
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		err = write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
