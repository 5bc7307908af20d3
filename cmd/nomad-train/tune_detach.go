package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/tune"
)

func init() {
	register("tuner", "Run a detached experiment's tuner: the task of the job `tune -detach` registers", tunerCmd)
}

// detachFlags are tune's flags for running the tuner on the cluster.
type detachFlags struct {
	detach          bool
	driver, command string
}

func (d *detachFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.detach, "detach", false, "run the tuner itself on Nomad, as the job <name>-tuner, and return; `nomad-train status <name>` follows it")
	fs.StringVar(&d.driver, "tuner-driver", "exec", "with -detach: the tuner task's driver, exec or raw_exec")
	fs.StringVar(&d.command, "tuner-command", tune.DefaultTunerCommand, "with -detach: nomad-train's path on the Nomad clients")
}

// detachTune registers the experiment's tuner job.
func detachTune(ctx context.Context, x *tune.Experiment, path string, sf *specFlags, cf *clusterFlags, d *detachFlags, stdout, stderr io.Writer) int {
	if cf.Address == "" {
		fmt.Fprintln(stderr, "nomad-train tune: -detach runs the tuner on Nomad: give -address or set NOMAD_ADDR")
		return exitUsage
	}
	if len(sf.varFiles) > 0 {
		fmt.Fprintln(stderr, "nomad-train tune: -detach takes -var, not -var-file (the file is not on the cluster)")
		return exitUsage
	}
	src, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
		return 1
	}
	var args []string
	for _, k := range slices.Sorted(maps.Keys(sf.vars)) {
		args = append(args, "-var", k+"="+sf.vars[k])
	}
	job, err := tune.TunerJob(tune.DetachOptions{Spec: x.Spec, Source: src, Args: args, Namespace: cf.Namespace,
		Driver: d.driver, Command: d.command})
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
		return exitSpec
	}
	c, err := cf.Client()
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
		return 1
	}
	r, err := tune.Detach(ctx, c, job)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "==> tune %q detached: job %s (evaluation %s), storage %s\n", x.Spec.Name, *job.ID, r.EvalID,
		filepath.Join(x.Spec.Run.StoragePath, x.Spec.Name))
	fmt.Fprintf(stdout, "    follow it with: nomad-train status %s\n", x.Spec.Name)
	return exitOK
}

// tunerCmd is the detached tuner: the experiment's tune on Nomad (NOMAD_ADDR
// and NOMAD_TOKEN from the task), resumed from its state when Nomad
// restarted the task. It exits 0 once the experiment has ended, with
// failed trials or not (they are in the state and results), so that Nomad
// does not run it again; an error of the tuner itself is exit 1 (Nomad
// restarts it).
func tunerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("tuner", "tuner [flags] train.hcl", stderr)
	var sf specFlags
	sf.register(fs)
	var cf clusterFlags
	cf.Register(fs)
	path, code := parseArgs(fs, args, stderr)
	if code >= 0 {
		return code
	}
	x, ok := console.LoadExperiment(path, sf.load("", true), stderr)
	if !ok {
		return exitSpec
	}
	c, err := cf.Client()
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train tuner: %v\n", err)
		return 1
	}
	cfg := x.Config
	cfg.Progress, cfg.KeepErrored = stdout, true
	nj := &tune.NomadJobs{API: c, Spec: x.Spec, Namespace: cf.Namespace}
	if kv := nomad.EnvConsulKV(); kv != nil {
		nj.KV = kv
	}
	grid, err := tune.New(nj, x.Space, cfg).Fit(ctx)
	if grid != nil {
		if werr := grid.WriteFiles(); werr != nil && err == nil {
			err = werr
		}
	}
	var me *tune.MetricError
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "nomad-train tuner: stopped")
		return 130
	case err != nil && !errors.As(err, &me):
		fmt.Fprintf(stderr, "nomad-train tuner: %v\n", err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "nomad-train tuner: %v\n", err) // the experiment ended
	}
	return exitOK
}

// detachedStatus prints a detached experiment: its tuner job's status and
// the trial table from its state on the storage; ok is false when run
// names no detached experiment.
func detachedStatus(ctx context.Context, c nomad.API, run string, stdout, stderr io.Writer) (code int, ok bool) {
	d, err := tune.ReadDetached(ctx, c, run)
	if errors.Is(err, tune.ErrNotDetached) {
		return 0, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train status: %v\n", err)
		return 1, true
	}
	d.Write(stdout)
	return 0, true
}
