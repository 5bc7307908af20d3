package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
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
		return runCluster(ctx, spec, job, &cf, stdout, stderr)
	}
	return runLocal(ctx, spec, stdout, stderr)
}

// runLocal runs the spec on this machine: the embedded default.
func runLocal(ctx context.Context, spec *trainspec.Spec, stdout, stderr io.Writer) int {
	opts := localOptions(spec, stdout, stderr)
	opts.OnMetrics = func(urls []string) { printMetricsURLs(stdout, urls) }
	fmt.Fprintf(stdout, "==> run %q: %s on this machine, storage %s\n",
		spec.Name, workers(spec.Scaling.NumWorkers), storage.RunLocation(spec.Run.StoragePath, spec.Name))
	rec, hadRec := readLastRun(ctx, spec)
	note := configChange(readNote(ctx, spec, lastConfigFile), spec.ConfigJSON)
	wnote := workersChange(rec, hadRec, spec.Scaling.NumWorkers)
	if hadRec && rec.Complete && note == "" && wnote == "" {
		fmt.Fprintf(stdout, "==> run %q is complete: nothing to train (run with -fresh to start it over)\n", spec.Name)
		return 0
	}
	for _, n := range []string{note, wnote} {
		if n != "" {
			fmt.Fprintf(stdout, "    %s\n", n)
		}
	}
	out, err := launch.Launch(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		return 1
	}
	// Best effort: they only feed the notes above.
	writeNote(ctx, spec, lastConfigFile, spec.ConfigJSON)
	writeLastRun(ctx, spec, lastRun{NumWorkers: spec.Scaling.NumWorkers})
	res, err := trainer.LoadResult(spec.Run.StoragePath, spec.Name, opts.Checkpoint, out,
		storage.WithStorageOptions(opts.Storage))
	// A failed run has no result to show (its error says why); a finished
	// one, or one every worker stopped at a checkpoint, shows where it is.
	if res != nil && (err == nil || errors.Is(err, trainer.ErrStopped)) {
		printResult(stdout, res)
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "nomad-train run: stopped; run it again to resume from the latest checkpoint")
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		return 1
	}
	writeLastRun(ctx, spec, lastRun{NumWorkers: spec.Scaling.NumWorkers, Complete: true})
	return 0
}

// localOptions are the launcher's settings for the spec: its run, and
// what only a local run has (the rejoin timeout, the output).
func localOptions(spec *trainspec.Spec, stdout, stderr io.Writer) launch.Options {
	return launch.Options{Run: spec.RunSpec(), RejoinTimeout: spec.Rendezvous.RejoinTimeout,
		Stdout: stdout, Stderr: stderr}
}

// lastConfigFile, in a run's directory, holds the config (JSON) of its
// last local launch, for configChange.
const lastConfigFile = "last-config.json"

// configChange says how config differs from before, the one the run last
// ran with, or "" when it does not (or there was none): a run resumes from
// its latest checkpoint whatever its config, so changing the config of a
// run that is far along, or done, should not go unnoticed.
func configChange(before, config []byte) string {
	if before == nil {
		return ""
	}
	var was, is map[string]any
	if json.Unmarshal(before, &was) != nil || json.Unmarshal(config, &is) != nil {
		return ""
	}
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(is)) {
		old, had := was[k]
		switch {
		case !had:
			diffs = append(diffs, fmt.Sprintf("%s %s (new)", k, compactJSON(is[k])))
		case !reflect.DeepEqual(old, is[k]):
			diffs = append(diffs, fmt.Sprintf("%s %s → %s", k, compactJSON(old), compactJSON(is[k])))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(was)) {
		if _, has := is[k]; !has {
			diffs = append(diffs, fmt.Sprintf("%s %s (gone)", k, compactJSON(was[k])))
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	return fmt.Sprintf("the config changed since the last run (%s); training resumes from the latest checkpoint with it (run with -fresh to start afresh)",
		strings.Join(diffs, ", "))
}

func compactJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// workers is "1 worker" or "n workers".
func workers(n int) string { return fmt.Sprintf("%d %s", n, plural(n, "worker", "workers")) }

func printResult(w io.Writer, r *trainer.Result) {
	fmt.Fprintln(w, "==> result")
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	for _, k := range slices.Sorted(maps.Keys(r.Metrics)) {
		fmt.Fprintf(tw, "    %s\t%v\n", k, r.Metrics[k])
	}
	if r.Checkpoint != nil {
		fmt.Fprintf(tw, "    checkpoint\t%s\n", r.Checkpoint.Path())
	}
	fmt.Fprintf(tw, "    metrics\t%s\n", r.MetricsPath)
	tw.Flush()
}

// workerProcess is how a local worker of spec starts: this binary for a
// builtin or a program that needs the external wrapper (python3 train.py),
// the program itself for a Go trainer (workerenv.StartFor decides, as the
// driver's does on Nomad).
func workerProcess(spec *trainspec.Spec) (workerenv.Process, error) {
	exe, err := os.Executable()
	if err != nil {
		return workerenv.Process{}, fmt.Errorf("find own executable: %w", err)
	}
	return workerenv.StartFor(workerenv.Entrypoint{Builtin: spec.Entrypoint.Builtin,
		Command: spec.Entrypoint.Command, Args: spec.Entrypoint.Args}, exe, workerenv.SpeaksContract)
}
