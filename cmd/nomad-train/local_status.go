package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/console"
)

// status, logs and list on local runs: a local run keeps its launcher's
// state (launch.StateFile), its workers' output (launch.LogPath) and its
// reports in its run directory, <storage>/<run>, where these commands read
// them. A run is addressed by its directory (nomad-train status
// ./results/quickstart) or by -storage and name (nomad-train status
// -storage ./results quickstart); list takes the storage path.

// defaultStorage is where `nomad-train run` keeps runs when the spec does
// not say.
const defaultStorage = console.DefaultStorage

// logsPollEvery is how often `logs -f` looks for more output.
var logsPollEvery = 250 * time.Millisecond

// localArgs are the parsed arguments of a status, logs or list command
// that addresses local runs.
type localArgs struct {
	storage string // -storage
	pos     []string
	rank    int  // logs -rank
	follow  bool // logs -f
}

// localCommand parses args for the command name with the cluster flags,
// -storage and extra, and reports whether they address local runs: with
// -storage, with a positional argument naming a directory, or with no
// Nomad address. It returns ok false, having printed nothing, when the
// command is for Nomad; code is the exit code when parsing ended it.
func localCommand(name string, args []string, stderr io.Writer, extra func(*flag.FlagSet, *localArgs)) (la localArgs, code int, ok bool) {
	fs := newFlagSet(name, name+" [flags] [run directory | run name]", stderr)
	var cf clusterFlags
	cf.Register(fs)
	fs.StringVar(&la.storage, "storage", "", "read local runs under this storage path (default "+defaultStorage+" when no Nomad address is set)")
	if extra != nil {
		extra(fs, &la)
	}
	fs.SetOutput(io.Discard) // the Nomad path reports usage errors
	pos, code := parseFlags(fs, args)
	if code == exitOK { // -h: this usage names every flag, local and Nomad
		fs.SetOutput(stderr)
		fs.Usage()
		return la, code, true
	}
	if code >= 0 {
		return la, code, false
	}
	fs.SetOutput(stderr)
	la.pos = pos
	isDir := len(pos) == 1 && console.IsDir(pos[0])
	return la, -1, la.storage != "" || isDir || cf.Address == ""
}

// runDir is the directory of the local run the arguments name.
func (la localArgs) runDir(name string, stderr io.Writer) (string, bool) {
	if len(la.pos) != 1 {
		fmt.Fprintf(stderr, "nomad-train %s: want one run (its directory, or its name with -storage), got %d arguments\n", name, len(la.pos))
		return "", false
	}
	dir, err := console.LocalRunDir(la.storage, la.pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train %s: %v\n", name, err)
		return "", false
	}
	return dir, true
}

// localStatus is `status` on a local run, or the list of runs when no run
// is named. ok is false when the arguments are for Nomad.
func localStatus(_ context.Context, args []string, stdout, stderr io.Writer) (int, bool) {
	la, code, ok := localCommand("status", args, stderr, nil)
	if !ok || code >= 0 {
		return code, ok
	}
	if len(la.pos) == 0 {
		return listLocal(la, stdout, stderr), true
	}
	dir, ok := la.runDir("status", stderr)
	if !ok {
		return exitUsage, true
	}
	if err := console.PrintLocalStatus(stdout, dir); err != nil {
		fmt.Fprintf(stderr, "nomad-train status: %v; for a run on Nomad set NOMAD_ADDR or -address\n", err)
		return 1, true
	}
	return 0, true
}

// localList is `list` on a storage path. ok is false when the arguments
// are for Nomad.
func localList(_ context.Context, args []string, stdout, stderr io.Writer) (int, bool) {
	la, code, ok := localCommand("list", args, stderr, nil)
	if !ok || code >= 0 {
		return code, ok
	}
	if len(la.pos) > 1 || (len(la.pos) == 1 && la.storage != "") {
		fmt.Fprintln(stderr, "nomad-train list: takes one storage path (or -storage)")
		return exitUsage, true
	}
	if len(la.pos) == 1 {
		la.storage, la.pos = la.pos[0], nil
	}
	return listLocal(la, stdout, stderr), true
}

// listLocal lists the runs under la's storage path.
func listLocal(la localArgs, stdout, stderr io.Writer) int {
	if err := console.PrintLocalRuns(stdout, la.storage); err != nil {
		fmt.Fprintf(stderr, "nomad-train list: %v; for runs on Nomad set NOMAD_ADDR or -address\n", err)
		return 1
	}
	return 0
}

// localLogs is `logs` on a local run: the rank's saved output (stdout and
// stderr together, the older rotated file first); -f follows it until the
// run ends. ok is false when the arguments are for Nomad.
func localLogs(ctx context.Context, args []string, stdout, stderr io.Writer) (int, bool) {
	la, code, ok := localCommand("logs", args, stderr, func(fs *flag.FlagSet, la *localArgs) {
		fs.IntVar(&la.rank, "rank", 0, "the worker's rank")
		fs.BoolVar(&la.follow, "f", false, "follow the logs (a local run: until it ends)")
		fs.Bool("stderr", false, "print stderr instead of stdout (a local run keeps both in one log)")
	})
	if !ok || code >= 0 {
		return code, ok
	}
	dir, ok := la.runDir("logs", stderr)
	if !ok {
		return exitUsage, true
	}
	if err := console.CopyLogs(ctx, stdout, dir, la.rank, la.follow, logsPollEvery); err != nil {
		fmt.Fprintf(stderr, "nomad-train logs: %v\n", err)
		return 1, true
	}
	if la.follow && ctx.Err() != nil {
		return 130, true
	}
	return 0, true
}
