package console

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// status and list of runs kept on an object store (a local run whose
// storage_path is s3://...). Their records and checkpoints are in the
// bucket, read through storage with the AWS environment, as the
// dashboard reads them; the launcher's state and the workers' logs stay
// with the launcher, in no run directory.

// splitRunLocation splits s3://bucket/prefix/<run> into the storage path
// and the run's name.
func splitRunLocation(loc string) (root, run string, err error) {
	l, err := objstore.ParseURL(loc)
	if err != nil {
		return "", "", err
	}
	i := strings.LastIndexByte(l.Prefix, '/')
	run, l.Prefix = l.Prefix[i+1:], l.Prefix[:max(i, 0)]
	if run == "" {
		return "", "", fmt.Errorf("%s names no run: want s3://bucket[/prefix]/<run>", loc)
	}
	return l.String(), run, nil
}

// storedRun is what status and list show of a run's records and
// checkpoints, on an object store or in a directory.
type storedRun struct {
	last      storage.Record
	reported  bool
	kept      int
	latest    storage.Record // the newest kept checkpoint's record
	hasLatest bool
}

func readStoredRun(ctx context.Context, root, run string, opts ...storage.Option) (storedRun, error) {
	st, err := storage.OpenStoreReadOnly(ctx, root, run, storage.Policy{}, opts...)
	if err != nil {
		return storedRun{}, err
	}
	defer st.Close()
	recs, err := st.Records()
	if err != nil {
		return storedRun{}, err
	}
	live, err := st.Best(0)
	if err != nil {
		return storedRun{}, err
	}
	var o storedRun
	if n := len(recs); n > 0 {
		o.last, o.reported = recs[n-1], true
	}
	o.kept = len(live)
	o.latest, o.hasLatest = storage.Newest(live)
	return o, nil
}

// printObjectStatus prints the run at loc (s3://bucket/prefix/<run>): its
// last report and its kept checkpoints, the newest by its location; or
// the experiment there.
func printObjectStatus(ctx context.Context, w io.Writer, loc string) error {
	root, run, err := splitRunLocation(loc)
	if err != nil {
		return err
	}
	o, err := readStoredRun(ctx, root, run)
	if err != nil {
		return err
	}
	if !o.reported {
		if ok, err := printExperimentStatus(ctx, w, loc); ok || err != nil {
			return err
		}
		if _, err := storage.ListRuns(ctx, root); err != nil {
			return err // a bucket that does not exist, say
		}
		return fmt.Errorf("%w: nothing at %s (no progress records, no experiment state)", ErrNoRun, loc)
	}
	if dir := launch.RunDir(root, run); dir == "" {
		fmt.Fprintf(w, "run %s: kept at %s\n", run, storage.RunLocation(root, run))
	} else if st, err := launch.ReadState(dir); err == nil {
		printLauncherState(w, dir, st) // launched from this machine
		fmt.Fprintf(w, "kept at %s\n", storage.RunLocation(root, run))
	} else {
		fmt.Fprintf(w, "run %s: kept at %s (its launcher's state and its workers' logs are on the machine that launched it)\n", run, storage.RunLocation(root, run))
	}
	fmt.Fprintf(w, "last report: %s\n", FormatRecord(o.last))
	printStart(ctx, w, root, run)
	o.printCheckpoints(w, root, run)
	return nil
}

// printCheckpoints says how many checkpoints the run keeps, and where the
// latest is (the location download takes).
func (o storedRun) printCheckpoints(w io.Writer, root, run string) {
	if o.hasLatest {
		fmt.Fprintf(w, "checkpoints: %d kept; the latest, of step %d: %s\n", o.kept, o.latest.Step,
			storage.CheckpointLocation(root, run, o.latest.Checkpoint))
	}
}

// printObjectRuns lists the runs under the s3:// storage path root, then
// the experiments there.
func printObjectRuns(ctx context.Context, w io.Writer, root string) error {
	runs, err := storage.ListRuns(ctx, root)
	if err != nil {
		return err
	}
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tSTEP\tRESTARTS\tUPDATED")
	for _, run := range runs {
		o, err := readStoredRun(ctx, root, run)
		if err != nil {
			return fmt.Errorf("reading run %s: %w", run, err)
		}
		status, step, restarts, updated := "-", "-", "-", time.Time{}
		if dir := launch.RunDir(root, run); dir != "" {
			if st, err := launch.ReadState(dir); err == nil { // launched from this machine
				status, restarts, updated = st.Phase, fmt.Sprint(st.Restarts), st.Updated
			}
		}
		if o.reported {
			step = fmt.Sprint(o.last.Step)
			if o.last.Time.After(updated) {
				updated = o.last.Time
			}
		}
		when := "-"
		if !updated.IsZero() {
			when = updated.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", run, status, step, restarts, when)
	}
	tw.Flush()
	return printRunsAndExperiments(ctx, w, table.String(), len(runs), root)
}
