package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/scheduler/tune"
)

func init() {
	register("tuner", "Run a detached experiment's tuner: the task of the job `tune -detach` registers", tunerCmd)
}

// detachFlags are tune's flags for running the tuner on the cluster.
type detachFlags struct {
	detach                  bool
	driver, command, consul string
}

func (d *detachFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.detach, "detach", false, "run the tuner itself on Nomad, as the job <name>-tuner, and return; nomad-train status <name> follows it")
	fs.StringVar(&d.driver, "tuner-driver", "exec", "with -detach: the tuner task's driver, exec or raw_exec")
	fs.StringVar(&d.command, "tuner-command", tune.DefaultTunerCommand, "with -detach: nomad-train's path on the Nomad clients")
	fs.StringVar(&d.consul, "tuner-consul-address", tune.DefaultTunerConsul,
		"with -detach: the Consul agent the tuner reaches from its client, to clear a retried trial's rendezvous keys (\"\": none)")
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
		return fail(stderr, "tune", err)
	}
	o := tune.DetachOptions{Source: src, Namespace: cf.Namespace, Driver: d.driver, Command: d.command, ConsulAddress: d.consul}
	for _, k := range slices.Sorted(maps.Keys(sf.vars)) {
		o.Args = append(o.Args, "-var", k+"="+sf.vars[k])
	}
	c, err := cf.Client()
	if err != nil {
		return fail(stderr, "tune", err)
	}
	return console.DetachTune(ctx, c, x, o, stdout, stderr)
}

// tunerCmd is the detached tuner (console.RunTuner), with NOMAD_ADDR and
// NOMAD_TOKEN from its task.
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
		return fail(stderr, "tuner", err)
	}
	return console.RunTuner(ctx, c, x, cf.Namespace, stdout, stderr)
}
