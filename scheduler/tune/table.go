package tune

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/nomad-train/nomad-train/internal/english"
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
	writeFrame(w, st, metric, "")
}

// writeFrame is WriteTable with a note after the summary line ("" for
// none).
func writeFrame(w io.Writer, st *ExperimentState, metric, note string) {
	var b strings.Builder
	writeTable(&b, st, metric, note)
	if f, ok := w.(Framer); ok {
		f.Frame(b.String())
		return
	}
	io.WriteString(w, b.String())
}

func writeTable(w io.Writer, st *ExperimentState, metric, note string) {
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
	for _, t := range st.Trials {
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
