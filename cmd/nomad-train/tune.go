package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/scheduler/tune"
)

func init() {
	register("tune", "Tune hyperparameters: run trials of a spec's search space (locally unless a Nomad address is given)", tuneCmd)
}

// loadExperiment reads a train.hcl spec with a tune block.
func loadExperiment(path string, sf *specFlags, forNomad bool, stderr io.Writer) (*tune.Experiment, bool) {
	spec, _, ok := loadSpec(path, sf, forNomad, stderr)
	if !ok {
		return nil, false
	}
	x, err := tune.FromSpec(spec)
	switch {
	case errors.Is(err, tune.ErrNoTuneBlock):
		fmt.Fprintf(stderr, "nomad-train tune: %s has no tune block; add one, or use `nomad-train run`\n", path)
		return nil, false
	case err != nil: // loadSpec checked the settings: only a changed file gets here
		fmt.Fprintf(stderr, "nomad-train tune: %s: %v\n", path, err)
		return nil, false
	}
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
	interval := fs.Duration("progress", 0, "how often to print the trial table (default 5s; 1s redrawn in place on a terminal)")
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
	o := console.TuneRun{Stdout: stdout, Stderr: stderr, Interval: *interval, Verbose: *verbose,
		Address: cf.address, Namespace: cf.namespace, WaitForCapacity: cf.waitForCapacity}
	// On a terminal the table redraws in place, under any -v output.
	if o.Live = terminal(stdout); o.Live != nil && o.Interval == 0 {
		o.Interval = time.Second
	}
	if cf.address != "" {
		c, err := cf.client()
		if err != nil {
			fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
			return 1
		}
		o.Nomad = c
	}
	return console.RunTune(ctx, x, o)
}
