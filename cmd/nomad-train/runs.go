package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// status, logs, list and stop: on Nomad, or (not stop) on local runs. A
// local run keeps its launcher's state (launch.StateFile), its workers'
// output (launch.LogPath) and its reports in its run directory,
// <storage>/<run>, where these commands read them (on S3, its reports and
// checkpoints). A run is addressed by its directory or s3:// location, or
// by -storage and name (nomad-train status -storage ./results quickstart);
// list takes the storage path.

func init() {
	register("status", "Show a run (on Nomad, or local by storage path, s3:// too): workers, restarts, last metrics", statusCmd)
	register("logs", "Print a worker's logs (from Nomad, or a local run's saved logs)", logsCmd)
	register("stop", "Stop a run on Nomad", stopCmd)
	register("list", "List the runs on Nomad, or under a storage path (a directory or s3://)", listCmd)
}

// defaultStorage is where `nomad-train run` keeps runs when the spec does
// not say.
const defaultStorage = console.DefaultStorage

// logsPollEvery is how often `logs -f` looks for more output.
var logsPollEvery = 250 * time.Millisecond

// runsCmd is a parsed status, logs, list or stop command.
type runsCmd struct {
	name    string
	flags   nomad.Flags
	storage string // -storage
	pos     []string
	// local: the arguments address local runs: -storage, a positional
	// argument naming a directory, or no Nomad address.
	local bool
}

// parseRuns parses args for the command name: the connection flags,
// -storage unless nomadOnly, and extra. code is the exit code when parsing
// ended the command, else -1.
func parseRuns(name, usage string, nomadOnly bool, args []string, stderr io.Writer, extra func(*flag.FlagSet)) (c runsCmd, code int) {
	fs := newFlagSet(name, usage, stderr)
	c.name = name
	c.flags.Register(fs)
	if !nomadOnly {
		fs.StringVar(&c.storage, "storage", "", "read local runs under this storage path, a directory or s3:// (default "+defaultStorage+" when no Nomad address is set)")
	}
	if extra != nil {
		extra(fs)
	}
	if c.pos, code = parseFlags(fs, args); code >= 0 {
		return c, code
	}
	isDir := len(c.pos) == 1 && console.IsRunLocation(c.pos[0])
	c.local = !nomadOnly && (c.storage != "" || isDir || c.flags.Address == "")
	return c, -1
}

// client connects to Nomad; code is the exit code when it cannot.
func (c runsCmd) client(stderr io.Writer) (*nomad.Client, int) {
	if c.flags.Address == "" {
		fmt.Fprintf(stderr, "nomad-train %s: no Nomad address: set NOMAD_ADDR or -address\n", c.name)
		return nil, exitUsage
	}
	cl, err := c.flags.Client()
	if err != nil {
		return nil, fail(stderr, c.name, err)
	}
	return cl, -1
}

// one is the one run the command names: its name on Nomad, its directory
// for a local run.
func (c runsCmd) one(stderr io.Writer) (string, bool) {
	if len(c.pos) != 1 {
		what := "run name"
		if c.local {
			what = "run (its directory, or its name with -storage)"
		}
		fmt.Fprintf(stderr, "nomad-train %s: want one %s, got %d arguments\n", c.name, what, len(c.pos))
		return "", false
	}
	if !c.local {
		return c.pos[0], true
	}
	dir, err := console.LocalRunDir(c.storage, c.pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train %s: %v\n", c.name, err)
		return "", false
	}
	return dir, true
}

// localHint follows an error about local runs.
const localHint = "; for runs on Nomad set NOMAD_ADDR or -address"

// withLocalHint adds localHint to an error about the runs at where, but
// for an s3:// location, which names no run on Nomad.
func withLocalHint(err error, where string) error {
	if storage.IsObjectPath(where) {
		return err
	}
	return fmt.Errorf("%w%s", err, localHint)
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, code := parseRuns("status", "status [flags] [run directory or s3:// location | run name]", false, args, stderr, nil)
	if code >= 0 {
		return code
	}
	if len(c.pos) == 0 {
		return listRuns(ctx, c, stdout, stderr)
	}
	run, ok := c.one(stderr)
	if !ok {
		return exitUsage
	}
	if c.local {
		if err := console.PrintLocalStatus(ctx, stdout, run); err != nil {
			return fail(stderr, "status", withLocalHint(err, run))
		}
		return 0
	}
	cl, code := c.client(stderr)
	if code >= 0 {
		return code
	}
	if code, ok := console.PrintDetachedStatus(ctx, cl, run, stdout, stderr); ok {
		return code
	}
	err := console.PrintNomadStatus(ctx, stdout, cl, run)
	if errors.Is(err, nomad.ErrNoSuchRun) { // an experiment's name, its tuner elsewhere?
		if ok, eerr := console.PrintNomadExperiment(ctx, stdout, cl, run); ok || eerr != nil {
			err = eerr
		}
	}
	if err != nil {
		return fail(stderr, "status", err)
	}
	return 0
}

func logsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var rank int
	var follow, errStream bool
	c, code := parseRuns("logs", "logs [flags] [run directory or s3:// location | run name]", false, args, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&rank, "rank", 0, "the worker's rank")
		fs.BoolVar(&follow, "f", false, "follow the logs (a local run: until it ends)")
		fs.BoolVar(&errStream, "stderr", false, "print stderr instead of stdout (a local run keeps both in one log)")
	})
	if code >= 0 {
		return code
	}
	run, ok := c.one(stderr)
	if !ok {
		return exitUsage
	}
	var err error
	if c.local {
		err = console.CopyLogs(ctx, stdout, run, rank, follow, logsPollEvery)
	} else {
		cl, code := c.client(stderr)
		if code >= 0 {
			return code
		}
		stream := map[bool]string{false: "stdout", true: "stderr"}[errStream]
		err = console.CopyNomadLogs(ctx, cl, stdout, run, rank, stream, follow)
	}
	switch {
	case err != nil:
		return fail(stderr, "logs", err)
	case follow && ctx.Err() != nil:
		return 130
	}
	return 0
}

func stopCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var purge bool
	c, code := parseRuns("stop", "stop [flags] <run or experiment>", true, args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&purge, "purge", false, "also remove the job and its secret from Nomad")
	})
	if code >= 0 {
		return code
	}
	cl, code := c.client(stderr)
	if code >= 0 {
		return code
	}
	run, ok := c.one(stderr)
	if !ok {
		return exitUsage
	}
	if _, err := cl.JobInfo(ctx, run); errors.Is(err, nomad.ErrNoSuchRun) { // an experiment's name?
		found, err := console.StopExperiment(ctx, stdout, cl, run, c.flags.Namespace, purge)
		if err != nil {
			return fail(stderr, "stop", err)
		}
		if found {
			return 0
		}
	}
	if err := nomad.Stop(ctx, cl, run, c.flags.Namespace, purge); err != nil {
		return fail(stderr, "stop", err)
	}
	fmt.Fprintf(stdout, "run %s stopped\n", run)
	return 0
}

func listCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, code := parseRuns("list", "list [flags] [storage path]", false, args, stderr, nil)
	if code >= 0 {
		return code
	}
	switch {
	case c.local && (len(c.pos) > 1 || (len(c.pos) == 1 && c.storage != "")):
		fmt.Fprintln(stderr, "nomad-train list: takes one storage path (or -storage)")
		return exitUsage
	case !c.local && len(c.pos) != 0:
		fmt.Fprintln(stderr, "nomad-train list: takes no arguments")
		return exitUsage
	case len(c.pos) == 1:
		c.storage, c.pos = c.pos[0], nil
	}
	return listRuns(ctx, c, stdout, stderr)
}

// listRuns lists the runs under the command's storage path, or on Nomad.
func listRuns(ctx context.Context, c runsCmd, stdout, stderr io.Writer) int {
	if c.local {
		if err := console.PrintLocalRuns(ctx, stdout, c.storage); err != nil {
			return fail(stderr, c.name, withLocalHint(err, c.storage))
		}
		return 0
	}
	cl, code := c.client(stderr)
	if code >= 0 {
		return code
	}
	if err := console.PrintRuns(ctx, stdout, cl); err != nil {
		return fail(stderr, c.name, err)
	}
	return 0
}
