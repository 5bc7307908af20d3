package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
)

func init() {
	register("status", "Show a run (on Nomad, or local by storage path): workers, restarts, last metrics", statusCmd)
	register("logs", "Print a worker's logs (from Nomad, or a local run's saved logs)", logsCmd)
	register("stop", "Stop a run on Nomad", stopCmd)
	register("list", "List the runs on Nomad, or under a local storage path", listCmd)
}

// progressEvery is how often a followed run's progress is re-read.
const progressEvery = 2 * time.Second

// clusterFlags are the Nomad CLI's connection flags and -local
// (nomad.LocalFlags), with the commands' own.
type clusterFlags struct {
	nomad.LocalFlags
	waitForCapacity bool
}

// resolveLocal applies -local after parsing (nomad.LocalFlags.ResolveLocal);
// code is exitUsage when the flags contradict each other, else -1.
func (f *clusterFlags) resolveLocal(fs *flag.FlagSet, stderr io.Writer) (code int) {
	if err := f.ResolveLocal(fs); err != nil {
		fmt.Fprintf(stderr, "nomad-train %s: %v\n", fs.Name(), err)
		return exitUsage
	}
	return -1
}

// followSettle is how long a failed run is followed further for its other
// ranks' allocations to end (nomad.RunOptions.Settle); tests shorten it.
var followSettle = 10 * time.Second

// clusterCommand parses a cluster subcommand's flags and connects.
func clusterCommand(name, usage string, args []string, stderr io.Writer, extra func(*flag.FlagSet)) (*nomad.Client, *clusterFlags, []string, int) {
	fs := newFlagSet(name, usage, stderr)
	var cf clusterFlags
	cf.Register(fs)
	if extra != nil {
		extra(fs)
	}
	pos, code := parseFlags(fs, args)
	if code >= 0 {
		return nil, nil, nil, code
	}
	if cf.Address == "" {
		fmt.Fprintf(stderr, "nomad-train %s: no Nomad address: set NOMAD_ADDR or -address\n", name)
		return nil, nil, nil, exitUsage
	}
	c, err := cf.Client()
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train %s: %v\n", name, err)
		return nil, nil, nil, 1
	}
	return c, &cf, pos, -1
}

// oneRun wants exactly one run name.
func oneRun(name string, pos []string, stderr io.Writer) (string, bool) {
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "nomad-train %s: want one run name, got %d arguments\n", name, len(pos))
		return "", false
	}
	return pos[0], true
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if code, local := localStatus(ctx, args, stdout, stderr); local {
		return code
	}
	c, _, pos, code := clusterCommand("status", "status [flags] [run]", args, stderr, nil)
	if code >= 0 {
		return code
	}
	if len(pos) == 0 {
		return listRuns(ctx, "status", c, stdout, stderr)
	}
	run, ok := oneRun("status", pos, stderr)
	if !ok {
		return exitUsage
	}
	if code, ok := console.PrintDetachedStatus(ctx, c, run, stdout, stderr); ok {
		return code
	}
	if err := console.PrintNomadStatus(ctx, stdout, c, run); err != nil {
		return fail(stderr, "status", err)
	}
	return 0
}

func logsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if code, local := localLogs(ctx, args, stdout, stderr); local {
		return code
	}
	var rank int
	var follow, errStream bool
	c, _, pos, code := clusterCommand("logs", "logs [flags] <run>", args, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&rank, "rank", 0, "the worker's rank")
		fs.BoolVar(&follow, "f", false, "follow the logs")
		fs.BoolVar(&errStream, "stderr", false, "print stderr instead of stdout")
	})
	if code >= 0 {
		return code
	}
	run, ok := oneRun("logs", pos, stderr)
	if !ok {
		return exitUsage
	}
	stream := "stdout"
	if errStream {
		stream = "stderr"
	}
	if err := console.CopyNomadLogs(ctx, c, stdout, run, rank, stream, follow); err != nil {
		return fail(stderr, "logs", err)
	}
	if ctx.Err() != nil {
		return 130
	}
	return 0
}

func stopCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var purge bool
	c, cf, pos, code := clusterCommand("stop", "stop [flags] <run>", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&purge, "purge", false, "also remove the job and its secret from Nomad")
	})
	if code >= 0 {
		return code
	}
	run, ok := oneRun("stop", pos, stderr)
	if !ok {
		return exitUsage
	}
	if err := nomad.Stop(ctx, c, run, cf.Namespace, purge); err != nil {
		return fail(stderr, "stop", err)
	}
	fmt.Fprintf(stdout, "run %s stopped\n", run)
	return 0
}

func listCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if code, local := localList(ctx, args, stdout, stderr); local {
		return code
	}
	c, _, pos, code := clusterCommand("list", "list [flags]", args, stderr, nil)
	if code >= 0 {
		return code
	}
	if len(pos) != 0 {
		fmt.Fprintln(stderr, "nomad-train list: takes no arguments")
		return exitUsage
	}
	return listRuns(ctx, "list", c, stdout, stderr)
}

// listRuns lists the runs, for the command cmd (list, or status with no
// run).
func listRuns(ctx context.Context, cmd string, c nomad.API, stdout, stderr io.Writer) int {
	if err := console.PrintRuns(ctx, stdout, c); err != nil {
		fmt.Fprintf(stderr, "nomad-train %s: %v\n", cmd, err)
		return 1
	}
	return 0
}
