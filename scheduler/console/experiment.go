package console

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// status and list of the experiments kept under a storage path, a
// directory or s3://, read from the state their tuner last wrote (as the
// dashboard reads them): a tune's trials are runs one level down, which
// the lists of runs do not show.

// printExperimentStatus prints the experiment at where from its state:
// its trial table and its best trial. ok is false when where holds no
// experiment.
func printExperimentStatus(ctx context.Context, w io.Writer, where string) (ok bool, err error) {
	st, ok, err := tune.LoadState(ctx, where)
	if err != nil || !ok {
		return false, err
	}
	fmt.Fprintf(w, "experiment %s: kept at %s, state of %s\n", st.Name, where, st.Written.Local().Format(time.DateTime))
	tune.WriteTable(w, st, st.Metric)
	if best, ok := tune.WriteBest(w, st); ok {
		fmt.Fprintf(w, "    its checkpoints: nomad-train status %s\n", storage.RunLocation(where, best.ID))
	}
	return true, nil
}

// printRunsAndExperiments writes the table of runs (of rows rows), then
// that of the experiments under root, if any.
func printRunsAndExperiments(ctx context.Context, w io.Writer, runs string, rows int, root string) error {
	exps, err := experimentsTable(ctx, root)
	if err != nil {
		return err
	}
	return writeTables(w, runs, rows, exps)
}

// writeTables writes a table of runs (of rows rows), then one of
// experiments ("": none): the runs' only when it has rows or there is no
// experiment, so that a place of experiments alone lists those.
func writeTables(w io.Writer, runs string, rows int, exps string) error {
	if rows > 0 || exps == "" {
		io.WriteString(w, runs)
	}
	if rows > 0 && exps != "" {
		fmt.Fprintln(w)
	}
	_, err := io.WriteString(w, exps)
	return err
}

// experimentsTable is the table of the experiments under root: each one's
// trials by status and its best trial; "" when there are none.
func experimentsTable(ctx context.Context, root string) (string, error) {
	names, err := storage.ListExperiments(ctx, root)
	if err != nil || len(names) == 0 {
		return "", err
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXPERIMENT\tTRIALS\tSTATUS\tBEST\tUPDATED")
	for _, name := range names {
		st, ok, err := tune.LoadState(ctx, storage.RunLocation(root, name))
		if err != nil {
			return "", fmt.Errorf("reading experiment %s: %w", name, err)
		}
		if !ok { // removed since the listing
			continue
		}
		best := "-"
		if t, ok := st.Best(); ok {
			best = fmt.Sprintf("%s %s=%s", t.ID, st.Metric, tune.FormatValue(t.LastResult[st.Metric]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", name, len(st.Trials), orDash(tune.StatusCounts(st)), best,
			st.Written.Local().Format(time.DateTime))
	}
	tw.Flush()
	return b.String(), nil
}
