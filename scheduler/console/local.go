package console

import (
	"context"
	"errors"
	"fmt"
	"io"
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
// reports in its run directory, <storage>/<run>, where these read them.

// ErrNoLocalRun is PrintLocalStatus's error for a directory that holds no
// local run; ErrNoRun, for an s3:// location that holds no run.
var (
	ErrNoLocalRun = errors.New("no local run")
	ErrNoRun      = errors.New("no run")
)

// PrintLocalStatus prints the local run in dir: its launcher's state, its
// workers, its last report and its checkpoints. dir may be a run's s3://
// location (LocalRunDir), whose records and checkpoints it prints, or an
// experiment's, whose trial table it prints.
func PrintLocalStatus(ctx context.Context, w io.Writer, dir string) error {
	if storage.IsObjectPath(dir) {
		return printObjectStatus(ctx, w, dir)
	}
	st, stErr := launch.ReadState(dir)
	last, hasLast := LastRecord(dir)
	if stErr != nil && !hasLast {
		if ok, err := printExperimentStatus(ctx, w, dir); ok || err != nil {
			return err
		}
		return fmt.Errorf("%w in %s (no %s, no %s, no %s)", ErrNoLocalRun, dir, launch.StateFile, storage.ProgressFile, storage.ExperimentStateFile)
	}
	if stErr != nil {
		fmt.Fprintf(w, "run %s: no launcher state (%v)\n", filepath.Base(dir), stErr)
	} else {
		printLauncherState(w, dir, st)
	}
	root, run := filepath.Dir(dir), filepath.Base(dir)
	if hasLast {
		fmt.Fprintf(w, "last report: %s\n", FormatRecord(last))
	}
	printStart(ctx, w, root, run)
	if o, err := readStoredRun(ctx, root, run); err == nil {
		o.printCheckpoints(w, root, run)
	}
	return nil
}

// printStart says which checkpoint the run started from, if it started
// from another run's (checkpoint { resume_from }).
func printStart(ctx context.Context, w io.Writer, root, run string, opts ...storage.Option) {
	if s, ok := launch.ReadStart(ctx, root, run, opts...); ok {
		fmt.Fprintf(w, "started from: %s\n", s)
	}
}

// printLauncherState prints a local run's launcher and workers from its
// state, kept in dir (launch.RunDir).
func printLauncherState(w io.Writer, dir string, st launch.State) {
	fmt.Fprintf(w, "run %s: %s (local, launcher pid %d on %s, started %s), %s, %s\n",
		st.Run, st.Phase, st.PID, st.Host, st.Started.Local().Format(time.DateTime), workers(st.NumWorkers), restarts(st.Restarts))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tPID\tSTATE\tRESTARTS\tMETRICS\tLOG")
	for _, wk := range st.Workers {
		log := "-"
		if wk.Log != "" { // where this command finds it, not where the launcher wrote it
			log = launch.LogPath(dir, wk.Rank)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\n", wk.Rank, wk.PID, workerState(wk), wk.Restarts, orDash(wk.Metrics), log)
	}
	tw.Flush()
	if st.Failure != "" {
		fmt.Fprintf(w, "failure: %s\n", st.Failure)
	}
}

func workerState(w launch.WorkerState) string {
	switch {
	case w.Running:
		return "running"
	case w.Lost:
		return "lost" // with its launcher: how it ended was never seen
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

// LastRecord is the latest report of the local run in dir, if it has one.
func LastRecord(dir string) (storage.Record, bool) {
	f, err := storage.Follow(context.Background(), filepath.Dir(dir), filepath.Base(dir))
	if err != nil {
		return storage.Record{}, false
	}
	defer f.Close()
	recs, _, err := f.NextRecords()
	if err != nil || len(recs) == 0 {
		return storage.Record{}, false
	}
	return recs[len(recs)-1], true
}

// PrintLocalRuns lists the runs under the local storage path root
// (DefaultStorage when ""): the directories that hold a launcher state or
// reports; then the experiments there, if any.
func PrintLocalRuns(ctx context.Context, w io.Writer, root string) error {
	if root == "" {
		root = DefaultStorage
	}
	if storage.IsObjectPath(root) {
		return printObjectRuns(ctx, w, root)
	}
	dir, err := storage.LocalDir(root)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("no local runs: %w", err)
	}
	var runs strings.Builder
	rows := 0
	tw := tabwriter.NewWriter(&runs, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tSTEP\tRESTARTS\tUPDATED")
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		runDir := filepath.Join(dir, e.Name())
		st, stErr := launch.ReadState(runDir)
		last, hasLast := LastRecord(runDir)
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
		rows++
	}
	tw.Flush()
	return printRunsAndExperiments(ctx, w, runs.String(), rows, dir)
}

// CopyLogs writes the saved output of rank in the local run in dir
// (stdout and stderr together, the older rotated file first); with follow
// it goes on, looking every pollEvery, until the run ends or ctx is done.
func CopyLogs(ctx context.Context, w io.Writer, dir string, rank int, follow bool, pollEvery time.Duration) error {
	if storage.IsObjectPath(dir) {
		root, run, err := splitRunLocation(dir)
		if err != nil {
			return err
		}
		if dir = launch.RunDir(root, run); dir == "" {
			return fmt.Errorf("no directory for the logs of %s on this machine (no home directory)", storage.RunLocation(root, run))
		}
		if _, err := os.Stat(launch.LogPath(dir, rank)); err != nil {
			return fmt.Errorf("no log of rank %d of %s on this machine: a run on S3 keeps its workers' logs on the machine that launched it (in %s), and on Nomad logs reads them from Nomad",
				rank, storage.RunLocation(root, run), dir)
		}
	}
	path := launch.LogPath(dir, rank)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no log of rank %d in %s: %w", rank, dir, err)
	}
	if b, err := os.ReadFile(path + ".1"); err == nil {
		w.Write(b)
	}
	t := &launch.LogTail{Path: path}
	if err := t.Copy(w); err != nil {
		return err
	}
	for follow && launch.Running(dir) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pollEvery):
		}
		if err := t.Copy(w); err != nil {
			return err
		}
	}
	if follow { // what the last moments wrote
		return t.Copy(w)
	}
	return nil
}

// PrintMetricsURLs says, in one line, where a local run's ranks serve
// Prometheus metrics (nothing when none does).
func PrintMetricsURLs(w io.Writer, urls []string) {
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

// LocalRunDir is the directory of the local run that arg names: a run
// directory (or a run's s3:// location), when it is one and no storage
// path is given, else the run of that name under storagePath (its s3://
// location under an s3:// storage path).
func LocalRunDir(storagePath, arg string) (string, error) {
	if storagePath == "" {
		if IsRunLocation(arg) {
			return arg, nil
		}
		storagePath = DefaultStorage
	}
	if storage.IsObjectPath(storagePath) {
		return storage.RunLocation(storagePath, arg), nil
	}
	dir := launch.RunDir(storagePath, arg)
	if dir == "" {
		return "", fmt.Errorf("storage %s is not a local directory", storagePath)
	}
	return dir, nil
}

// DefaultStorage is where `nomad-train run` keeps runs when the spec does
// not say (train.hcl's default storage_path).
const DefaultStorage = "./results"

// IsRunLocation reports whether p names a run or its storage path by
// itself: a directory, or an s3:// location.
func IsRunLocation(p string) bool { return IsDir(p) || storage.IsObjectPath(p) }

// IsDir reports whether p is a directory.
func IsDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
