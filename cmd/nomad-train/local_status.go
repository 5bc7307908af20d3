package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// status, logs and list on local runs: a local run keeps its launcher's
// state (launch.StateFile), its workers' output (launch.LogPath) and its
// reports in its run directory, <storage>/<run>, where these commands read
// them. A run is addressed by its directory (nomad-train status
// ./results/quickstart) or by -storage and name (nomad-train status
// -storage ./results quickstart); list takes the storage path.

// defaultStorage is where `nomad-train run` keeps runs when the spec does
// not say (hcl's default storage_path).
const defaultStorage = "./results"

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
	cf.register(fs)
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
	isDir := len(pos) == 1 && dirExists(pos[0])
	return la, -1, la.storage != "" || isDir || cf.address == ""
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// runDir is the directory of the local run the arguments name.
func (la localArgs) runDir(name string, stderr io.Writer) (string, bool) {
	if len(la.pos) != 1 {
		fmt.Fprintf(stderr, "nomad-train %s: want one run (its directory, or its name with -storage), got %d arguments\n", name, len(la.pos))
		return "", false
	}
	if la.storage == "" && dirExists(la.pos[0]) {
		return la.pos[0], true
	}
	root := la.storage
	if root == "" {
		root = defaultStorage
	}
	dir := launch.RunDir(root, la.pos[0])
	if dir == "" {
		fmt.Fprintf(stderr, "nomad-train %s: storage %s is not a local directory\n", name, root)
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
	st, stErr := launch.ReadState(dir)
	last, hasLast := lastRecord(dir)
	if stErr != nil && !hasLast {
		fmt.Fprintf(stderr, "nomad-train status: no local run in %s (no %s, no %s); for a run on Nomad set NOMAD_ADDR or -address\n", dir, launch.StateFile, storage.ProgressFile)
		return 1, true
	}
	if stErr != nil {
		fmt.Fprintf(stdout, "run %s: no launcher state (%v)\n", filepath.Base(dir), stErr)
	} else {
		fmt.Fprintf(stdout, "run %s: %s (local, launcher pid %d on %s, started %s), %d workers, %d restarts\n",
			st.Run, st.Phase, st.PID, st.Host, st.Started.Local().Format(time.DateTime), st.NumWorkers, st.Restarts)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RANK\tPID\tSTATE\tRESTARTS\tMETRICS\tLOG")
		for _, w := range st.Workers {
			log := "-"
			if w.Log != "" { // where this command finds it, not where the launcher wrote it
				log = launch.LogPath(dir, w.Rank)
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\n", w.Rank, w.PID, workerState(w), w.Restarts, orDash(w.Metrics), log)
		}
		tw.Flush()
		if st.Failure != "" {
			fmt.Fprintf(stdout, "failure: %s\n", st.Failure)
		}
	}
	if hasLast {
		fmt.Fprintf(stdout, "last report: %s\n", formatRecord(last))
	}
	return 0, true
}

func workerState(w launch.WorkerState) string {
	switch {
	case w.Running:
		return "running"
	case w.Signal != "":
		return "killed (" + w.Signal + ")"
	case w.PID == 0:
		return "pending"
	}
	return fmt.Sprintf("exited (%d)", w.ExitCode)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// lastRecord is the run's latest report, if it has one.
func lastRecord(dir string) (storage.Record, bool) {
	var last storage.Record
	found := false
	err := storage.ScanProgressFile(filepath.Join(dir, storage.ProgressFile), func(r storage.Record) error {
		last, found = r, true
		return nil
	})
	return last, err == nil && found
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

// listLocal lists the runs under la's storage path: the directories that
// hold a launcher state or reports.
func listLocal(la localArgs, stdout, stderr io.Writer) int {
	root := la.storage
	if root == "" {
		root = defaultStorage
	}
	dir, err := storage.LocalDir(root)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train list: %v\n", err)
		return 1
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train list: no local runs: %v; for runs on Nomad set NOMAD_ADDR or -address\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tSTEP\tRESTARTS\tUPDATED")
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		runDir := filepath.Join(dir, e.Name())
		st, stErr := launch.ReadState(runDir)
		last, hasLast := lastRecord(runDir)
		if stErr != nil && !hasLast {
			continue
		}
		status, restarts, updated := "-", "-", st.Updated
		if stErr == nil {
			status, restarts = st.Phase, fmt.Sprint(st.Restarts)
		}
		step := "-"
		if hasLast {
			step = fmt.Sprint(last.Step)
			if last.Time.After(updated) {
				updated = last.Time
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Name(), status, step, restarts, updated.Local().Format(time.DateTime))
	}
	tw.Flush()
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
	path := launch.LogPath(dir, la.rank)
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(stderr, "nomad-train logs: no log of rank %d in %s: %v\n", la.rank, dir, err)
		return 1, true
	}
	if b, err := os.ReadFile(path + ".1"); err == nil {
		stdout.Write(b)
	}
	t := &logTail{path: path}
	if err := t.copy(stdout); err != nil {
		fmt.Fprintf(stderr, "nomad-train logs: %v\n", err)
		return 1, true
	}
	for la.follow && running(dir) {
		select {
		case <-ctx.Done():
			return exitFor(ctx, 0), true
		case <-time.After(logsPollEvery):
		}
		if err := t.copy(stdout); err != nil {
			fmt.Fprintf(stderr, "nomad-train logs: %v\n", err)
			return 1, true
		}
	}
	if la.follow { // what the last moments wrote
		if err := t.copy(stdout); err != nil {
			fmt.Fprintf(stderr, "nomad-train logs: %v\n", err)
			return 1, true
		}
	}
	return 0, true
}

// running reports whether the run in dir is still going.
func running(dir string) bool {
	st, err := launch.ReadState(dir)
	return err == nil && st.Phase == launch.PhaseRunning
}

// logTail copies what a rotating log gained since the last copy. A file
// that was rotated (a new file at the path) is read from its start, after
// the rest of the old one, which rotation kept as path.1.
type logTail struct {
	path string
	fi   os.FileInfo // the file read last
	off  int64
}

func (t *logTail) copy(w io.Writer) error {
	f, err := os.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // between the rename and the new file
	}
	if err != nil {
		return fmt.Errorf("read log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("read log: %w", err)
	}
	if t.fi != nil && !os.SameFile(t.fi, fi) {
		// Rotated: the rest of the old file is path.1 now.
		if old, err := os.Open(t.path + ".1"); err == nil {
			if oldFi, err := old.Stat(); err == nil && os.SameFile(oldFi, t.fi) {
				old.Seek(t.off, io.SeekStart)
				io.Copy(w, old)
			}
			old.Close()
		}
		t.off = 0
	}
	t.fi = fi
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return fmt.Errorf("read log: %w", err)
	}
	n, err := io.Copy(w, f)
	t.off += n
	if err != nil {
		return fmt.Errorf("read log: %w", err)
	}
	return nil
}

// printMetricsURLs says, in one line, where a local run's ranks serve
// Prometheus metrics (nothing when none does).
func printMetricsURLs(w io.Writer, urls []string) {
	var parts []string
	for rank, u := range urls {
		if u != "" {
			parts = append(parts, fmt.Sprintf("rank %d %s", rank, u))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "    metrics (Prometheus): %s\n", strings.Join(parts, ", "))
	}
}
