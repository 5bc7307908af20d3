package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainspec"
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
	cf.register(fs)
	fs.BoolVar(&cf.waitForCapacity, "wait-for-capacity", false, "on Nomad, wait until the whole gang fits instead of refusing (not when no node could ever run a worker)")
	cf.registerLocal(fs)
	fresh := fs.Bool("fresh", false, "start the run over: move its local directory aside to <run>.old-<time> (nothing is deleted)")
	path, code := parseArgs(fs, args, stderr)
	if code >= 0 {
		return code
	}
	if code := cf.resolveLocal(fs, stderr); code >= 0 {
		return code
	}
	// Compile-time warnings are about Nomad: a local run skips them.
	spec, job, ok := loadSpecFor("nomad-train run", path, &sf, cf.address != "", stderr)
	if !ok {
		return 1
	}
	if *fresh {
		if cf.address != "" {
			fmt.Fprintln(stderr, "nomad-train run: -fresh applies to local runs; on Nomad, purge the job and move its storage aside")
			return 2
		}
		if err := startFresh(spec, time.Now(), stdout); err != nil {
			fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
			return 1
		}
	}
	if cf.address != "" {
		c, err := cf.client()
		if err != nil {
			fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
			return 1
		}
		return console.FollowNomad(ctx, c, spec, job, console.NomadRun{Address: cf.address, Namespace: cf.namespace,
			WaitForCapacity: cf.waitForCapacity, Settle: followSettle, ProgressEvery: progressEvery}, stdout, stderr)
	}
	return console.RunLocal(ctx, spec, console.LocalRun{Options: localOptions(spec),
		Stdout: stdout, Stderr: stderr, Live: terminal(stdout)})
}

// localOptions are the launcher's settings for the spec: its run, and
// what only a local run has (the rejoin timeout).
func localOptions(spec *trainspec.Spec) launch.Options {
	return launch.Options{Run: spec.RunSpec(), RejoinTimeout: spec.Rendezvous.RejoinTimeout}
}

// terminal is a live writer on w when w is this process's standard output
// and a terminal; nil otherwise (plain lines).
func terminal(w io.Writer) *console.Live {
	if f, ok := w.(*os.File); ok && f == os.Stdout {
		return console.Terminal(f)
	}
	return nil
}

// startFresh moves the spec's run directory aside to <dir>.old-<time> so
// that the run starts over; it never deletes a user's checkpoints. It
// says where the old run went, or nothing when there was none.
func startFresh(spec *trainspec.Spec, now time.Time, stdout io.Writer) error {
	dir := launch.RunDir(spec.Run.StoragePath, spec.Name)
	if dir == "" {
		return fmt.Errorf("-fresh needs a local storage path, not %q: remove the run's objects yourself", spec.Run.StoragePath)
	}
	aside, err := launch.MoveAside(dir, now)
	if err != nil || aside == "" {
		return err
	}
	if abs, err := filepath.Abs(aside); err == nil {
		aside = abs
	}
	fmt.Fprintf(stdout, "==> starting afresh: the previous run moved to %s\n", aside)
	return nil
}
