package tune

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// A Framer shows the trial table in place: a terminal redraws it rather
// than print it again. WriteTable hands it each table whole.
type Framer interface {
	Frame(table string)
}

// WriteTable writes the live trial table: trial, status, sampled params,
// iterations, the time trained and the latest value of metric, with a
// status summary line.
// A w that is a Framer gets it as one frame.
func WriteTable(w io.Writer, st *ExperimentState, metric string) {
	writeFrame(w, st, metric, "", 0)
}

// liveRows bounds the rows of the table the tuner shows while it runs
// (Ray's max_progress_rows): an experiment of hundreds of trials would
// otherwise print them all at every tick.
const liveRows = 20

// writeFrame is WriteTable with a note after the summary line ("" for
// none) and at most maxRows trials (0: all; see shownTrials).
func writeFrame(w io.Writer, st *ExperimentState, metric, note string, maxRows int) {
	var b strings.Builder
	writeTable(&b, st, metric, note, maxRows)
	if f, ok := w.(Framer); ok {
		f.Frame(b.String())
		return
	}
	io.WriteString(w, b.String())
}

func writeTable(w io.Writer, st *ExperimentState, metric, note string, maxRows int) {
	params := map[string]bool{}
	for _, t := range st.Trials {
		for k := range t.Params {
			params[k] = true
		}
	}
	if note != "" {
		note = "; " + note
	}
	fmt.Fprintf(w, "== %s: %s (%s)%s\n", st.Name, english.Count(len(st.Trials), "trial", "trials"), StatusCounts(st), note)
	keys := sortedTrials(params)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := append([]string{"trial", "status"}, keys...)
	head = append(head, "iter", "total time (s)")
	if metric != "" {
		head = append(head, metric)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	rows, hidden := shownTrials(st, maxRows)
	for _, t := range rows {
		row := []string{t.ID, t.Status}
		params := t.ParamsNow()
		for _, k := range keys {
			row = append(row, FormatValue(params[k]))
		}
		row = append(row, strconv.Itoa(t.Iterations), seconds(t.TimeTotal))
		if metric != "" {
			row = append(row, FormatValue(t.LastResult[metric]))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	if n := len(st.Trials) - len(rows); n > 0 {
		fmt.Fprintf(w, "... %d more not shown (%s)\n", n, statusList(hidden))
	}
}

// shownTrials picks up to maxRows of st's trials for a table (all when
// maxRows is 0 or they fit): the running first, then the failed, then the
// finished by their last result (best first, by the state's metric), then
// the pending; shown in trial order. hidden counts the others by status.
func shownTrials(st *ExperimentState, maxRows int) (rows []*TrialState, hidden map[string]int) {
	if maxRows <= 0 || len(st.Trials) <= maxRows {
		return st.Trials, nil
	}
	sign := 1.0
	if st.Mode == ModeMax {
		sign = -1
	}
	// Each trial's place, worked out once: its class, then (finished
	// ones) its last value, lower first, none last.
	type key struct {
		class int
		score float64
	}
	keys := make([]key, len(st.Trials))
	for i, t := range st.Trials {
		switch t.Status {
		case StatusRunning:
			keys[i].class = 0
		case StatusError:
			keys[i].class = 1
		case StatusTerminated, StatusStopped:
			keys[i] = key{2, math.Inf(1)}
			if v, ok := storage.Score(storage.Record{Metrics: t.LastResult}, st.Metric); ok && st.Metric != "" {
				keys[i].score = sign * v
			}
		default:
			keys[i].class = 3
		}
	}
	order := make([]int, len(st.Trials))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(keys[a].class, keys[b].class), cmp.Compare(keys[a].score, keys[b].score))
	})
	chosen := order[:maxRows]
	slices.Sort(chosen)
	hidden = map[string]int{}
	for _, i := range order[maxRows:] {
		hidden[st.Trials[i].Status]++
	}
	for _, i := range chosen {
		rows = append(rows, st.Trials[i])
	}
	return rows, hidden
}

// WriteBest writes the line of st's best trial by its last result (see
// ExperimentState.Best); ok is false, and nothing written, when there is
// none.
func WriteBest(w io.Writer, st *ExperimentState) (best *TrialState, ok bool) {
	if best, ok = st.Best(); ok {
		fmt.Fprintf(w, "best trial %s: %s %v, config %s\n", best.ID, st.Metric, best.LastResult[st.Metric], FormatConfig(best.Config))
	}
	return best, ok
}

// StatusCounts says how many of st's trials are in each status, running
// first: "2 RUNNING, 5 TERMINATED".
func StatusCounts(st *ExperimentState) string {
	counts := map[string]int{}
	for _, t := range st.Trials {
		counts[t.Status]++
	}
	return statusList(counts)
}

// statusList words counts by status, running first.
func statusList(counts map[string]int) string {
	var summary []string
	for _, s := range []string{StatusRunning, StatusPending, StatusTerminated, StatusStopped, StatusError} {
		if counts[s] > 0 {
			summary = append(summary, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	return strings.Join(summary, ", ")
}

// seconds shows a time trained in seconds as the table shows metrics,
// or "-" for none.
func seconds(s float64) string {
	if s <= 0 {
		return "-"
	}
	return FormatValue(s)
}

// FormatValue shows a param or metric as the trial table does: numbers
// to 5 significant digits, "-" for none.
func FormatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case float64:
		return strconv.FormatFloat(x, 'g', 5, 64)
	}
	return fmt.Sprint(v)
}

// FormatConfig renders a trial's config on one line: key=value with the
// keys sorted, each value as results.csv writes it (numbers in full,
// strings as they are, lists and maps as JSON).
func FormatConfig(config map[string]any) string {
	keys := sortedTrials(config)
	kv := make([]string, len(keys))
	for i, k := range keys {
		kv[i] = k + "=" + cell(config[k])
	}
	return strings.Join(kv, " ")
}

// ParamsNow returns the sampled parameters (Params, by path) with the
// values the trial's config has now: a PBT exploit changes the config a
// trial goes on with, and tables show that, as Ray's do, not what was
// sampled at its start.
func (t *TrialState) ParamsNow() map[string]any { return paramsNow(t.Config, t.Params) }

func paramsNow(config, params map[string]any) map[string]any {
	if params == nil {
		return nil
	}
	now := make(map[string]any, len(params))
	for k, v := range params {
		if c := getPath(config, strings.Split(k, "/")); c != nil {
			v = c
		}
		now[k] = v
	}
	return now
}
