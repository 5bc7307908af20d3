package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/console"
)

func init() {
	register("tune", "Tune hyperparameters: run trials of a spec's search space (locally unless a Nomad address is given)", tuneCmd)
}

func tuneCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("tune", "tune [flags] train.hcl\n\n"+
		"Runs the trials of a spec's tune block on local worker processes, or with -address\n"+
		"(or NOMAD_ADDR) each as its own Nomad job <name>-trial_NNNN, whose storage is then\n"+
		"s3:// or a path the clients share (-detach runs the tuner itself on Nomad). Shows a\n"+
		"live table, writes results.csv and results.json, resumes unfinished trials when run\n"+
		"again, and exits 1 when a trial failed beyond its max_failures.", stderr)
	interval := fs.Duration("progress", 0, "how often to print the trial table (default 5s; 1s redrawn in place on a terminal)")
	verbose := fs.Bool("v", false, "show the workers' output and errors, each line prefixed with its trial and rank")
	var sf specFlags
	sf.register(fs)
	var cf clusterFlags // -address etc.: an address runs the trials on Nomad
	fs.BoolVar(&cf.waitForCapacity, "wait-for-capacity", true, "on Nomad, a trial whose gang does not fit waits, PENDING, until it does (false: it fails at once); a gang no node could ever hold fails either way")
	cf.RegisterLocal(fs)
	var df detachFlags
	df.register(fs)
	fresh := fs.Bool("fresh", false, "start the experiment over: move its local directory aside to <name>.old-<time> (nothing is deleted)")
	path, code := parseArgs(fs, args, stderr)
	if code >= 0 {
		return code
	}
	if code := cf.resolveLocal(fs, stderr); code >= 0 {
		return code
	}
	x, ok := console.LoadExperiment(path, sf.load("", cf.Address != ""), stderr)
	if !ok {
		return exitSpec
	}
	if *fresh && df.detach {
		fmt.Fprintln(stderr, "nomad-train tune: -fresh applies to a tuner on this machine; stop the tuner job and move its storage aside")
		return exitUsage
	}
	if df.detach {
		return detachTune(ctx, x, path, &sf, &cf, &df, stdout, stderr)
	}
	if *fresh {
		if err := console.TuneFresh(ctx, x, time.Now(), stdout); err != nil {
			return fail(stderr, "tune", err)
		}
	}
	o := console.TuneRun{Stdout: stdout, Stderr: stderr, Interval: *interval, Verbose: *verbose,
		Address: cf.Address, Namespace: cf.Namespace, WaitForCapacity: cf.waitForCapacity}
	// On a terminal the table redraws in place, under any -v output.
	if o.Live = terminal(stdout); o.Live != nil && o.Interval == 0 {
		o.Interval = time.Second
	}
	if cf.Address != "" {
		c, err := cf.Client()
		if err != nil {
			return fail(stderr, "tune", err)
		}
		o.Nomad = c
	}
	return console.RunTune(ctx, x, o)
}
