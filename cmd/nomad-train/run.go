package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/console"
)

func init() {
	register("run", "Run a train.hcl spec (locally unless a Nomad address is given)", runCmd)
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", "run [flags] train.hcl\n\n"+
		"Trains the spec's config once: as a Nomad job when a Nomad address is given\n"+
		"(-address, or NOMAD_ADDR in the environment), else on this machine (the\n"+
		"embedded default; -local insists on it).", stderr)
	var sf specFlags
	sf.register(fs)
	var cf clusterFlags // -address etc.: an address runs on Nomad, none locally
	fs.BoolVar(&cf.waitForCapacity, "wait-for-capacity", false, "on Nomad, wait until the whole gang fits instead of refusing (not when no node could ever run a worker)")
	cf.RegisterLocal(fs)
	force := fs.Bool("force", false, "run locally even with far more workers than this machine has cores")
	fresh := fs.Bool("fresh", false, "start the run over: move its local directory aside to <run>.old-<time> (nothing is deleted)")
	path, code := parseArgs(fs, args, stderr)
	if code >= 0 {
		return code
	}
	if code := cf.resolveLocal(fs, stderr); code >= 0 {
		return code
	}
	// Compile-time warnings are about Nomad: a local run skips them.
	spec, job, ok := loadSpecFor("nomad-train run", path, &sf, cf.Address != "", stderr)
	if !ok {
		return 1
	}
	if *fresh {
		if cf.Address != "" {
			fmt.Fprintln(stderr, "nomad-train run: -fresh applies to local runs; on Nomad, purge the job and move its storage aside")
			return 2
		}
		if err := console.StartFresh(spec, time.Now(), stdout); err != nil {
			return fail(stderr, "run", err)
		}
	}
	if cf.Address != "" {
		c, err := cf.Client()
		if err != nil {
			return fail(stderr, "run", err)
		}
		return console.FollowNomad(ctx, c, spec, job, console.NomadRun{Address: cf.Address, Namespace: cf.Namespace,
			WaitForCapacity: cf.waitForCapacity, Settle: followSettle, ProgressEvery: progressEvery, Live: terminal(stdout)}, stdout, stderr)
	}
	if !console.LocalWorkersOK(path, spec, *force, stderr) {
		return 1
	}
	return console.RunLocal(ctx, spec, console.LocalRun{Options: console.LocalOptions(spec),
		Stdout: stdout, Stderr: stderr, Live: terminal(stdout), LiveStderr: terminal(stderr) != nil})
}

// terminal is a live writer on w when w is this process's standard output
// (or error) and a terminal; nil otherwise (plain lines).
func terminal(w io.Writer) *console.Live {
	if f, ok := w.(*os.File); ok && (f == os.Stdout || f == os.Stderr) {
		return console.Terminal(f)
	}
	return nil
}
