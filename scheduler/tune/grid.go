package tune

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strconv"
	"strings"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// TrialResult is one trial of a result grid (Ray's Result).
type TrialResult struct {
	ID     string         `json:"id"`
	Config map[string]any `json:"config"`
	Params map[string]any `json:"params,omitempty"`
	Status string         `json:"status"`
	Reason string         `json:"reason,omitempty"`
	// Metrics are the last reported metrics.
	Metrics map[string]any `json:"metrics,omitempty"`
	// History is every report of the trial, in order (cloned records left
	// out); Iterations is its length.
	History    []map[string]any `json:"history,omitempty"`
	Iterations int              `json:"iterations"`
	// TimeTotal is the seconds the trial had trained at its last report
	// (Ray's time_total_s); 0 when its records do not say.
	TimeTotal float64 `json:"time_total_s,omitempty"`
	// Path is the trial's run directory; BestCheckpoint the directory of
	// its best kept checkpoint by the grid's metric and mode (the latest
	// when there is no metric), "" when it has none.
	Path           string `json:"path"`
	BestCheckpoint string `json:"best_checkpoint,omitempty"`
	Failures       int    `json:"failures,omitempty"`
}

// ResultGrid is every trial of an experiment (Ray's ResultGrid).
type ResultGrid struct {
	Path         string        `json:"path"` // the experiment's place
	Metric, Mode string        `json:"-"`
	Trials       []TrialResult `json:"trials"`

	opts []storage.Option // to write beside the state on an object store
}

// ErrNoResult is returned by Best when no trial reported the metric.
var ErrNoResult = errors.New("no trial reported the metric")

// MetricError is Fit's error when trials reported results but none of the
// reports holds the experiment's metric (a misspelt name, most likely):
// the scheduler had nothing to go by and no trial is best.
type MetricError struct {
	Metric   string
	Reported []string // the metrics the trials did report, sorted
}

func (e *MetricError) Error() string {
	return fmt.Sprintf("metric %q is not among the reported metrics (%s)", e.Metric, strings.Join(e.Reported, ", "))
}

// metricReported returns a *MetricError when the trials reported results
// and none of them holds the grid's metric.
func (g *ResultGrid) metricReported() error {
	if g.Metric == "" {
		return nil
	}
	reported := map[string]bool{}
	for _, t := range g.Trials {
		for _, m := range t.History {
			if _, ok := m[g.Metric]; ok {
				return nil
			}
			for k := range m {
				reported[k] = true
			}
		}
	}
	if len(reported) == 0 {
		return nil
	}
	return &MetricError{Metric: g.Metric, Reported: sortedTrials(reported)}
}

// LoadResultGrid reads the experiment at where (a directory or an s3://
// location; opts give an object store's options): its state and every
// trial's runs.
func LoadResultGrid(ctx context.Context, where, metric, mode string, opts ...storage.Option) (*ResultGrid, error) {
	return loadResultGrid(ctx, where, trialStore{root: where, opts: opts}, metric, mode)
}

// loadResultGrid reads the experiment's state at where and its trials'
// runs through storage, wherever trials keeps them.
func loadResultGrid(ctx context.Context, where string, trials trialStore, metric, mode string) (*ResultGrid, error) {
	st, ok, err := LoadState(ctx, where, trials.opts...)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("no experiment state in %s", where)
	}
	g := &ResultGrid{Path: where, Metric: metric, Mode: mode, opts: trials.opts}
	policy := storage.Policy{}
	if metric != "" {
		policy = storage.Policy{ScoreAttribute: metric, ScoreOrder: storage.ScoreMax}
		if mode == ModeMin {
			policy.ScoreOrder = storage.ScoreMin
		}
	}
	for _, ts := range st.Trials {
		tr := TrialResult{ID: ts.ID, Config: ts.Config, Params: ts.Params, Status: ts.Status, Reason: ts.Reason,
			Path: trials.location(ts.ID), Failures: ts.Failures}
		recs, best, err := trials.results(ctx, ts.ID, policy)
		if errors.Is(err, fs.ErrNotExist) { // a trial that never started
			recs, best, err = nil, nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read progress of %s: %w", ts.ID, err)
		}
		for _, rec := range recs {
			if _, cloned := rec.Metrics[ClonedFrom]; cloned {
				continue
			}
			tr.History = append(tr.History, rec.Metrics)
			tr.Metrics = rec.Metrics
			tr.TimeTotal, _ = attr(rec, TimeTotal)
		}
		tr.Iterations = len(tr.History)
		if best != nil {
			tr.BestCheckpoint = trials.checkpoint(ts.ID, best.Checkpoint)
		}
		g.Trials = append(g.Trials, tr)
	}
	return g, nil
}

// TotalIterations is the number of reports in every trial's history
// together: the compute the experiment spent, in iterations (epochs for
// most trainers), less any iterations a restarted trial rolled back to
// its checkpoint and redid.
func (g *ResultGrid) TotalIterations() int {
	n := 0
	for _, t := range g.Trials {
		n += t.Iterations
	}
	return n
}

// NumErrors is how many trials ended in ERROR, having failed more often
// than their failure budget allows (Ray's ResultGrid.num_errors).
func (g *ResultGrid) NumErrors() int {
	n := 0
	for _, t := range g.Trials {
		if t.Status == StatusError {
			n++
		}
	}
	return n
}

// Scopes of BestOf, as in Ray's get_best_result.
const (
	ScopeLast = "last" // each trial's last report
	ScopeAll  = "all"  // each trial's best report
)

// Best returns the trial whose last reported metric is best under mode
// (Ray's get_best_result with scope "last"). Empty metric and mode use the
// grid's.
func (g *ResultGrid) Best(metric, mode string) (*TrialResult, error) {
	return g.BestOf(metric, mode, ScopeLast)
}

// BestOf returns the best trial by metric and mode, judging each trial by
// its last report (ScopeLast) or its best one (ScopeAll).
func (g *ResultGrid) BestOf(metric, mode, scope string) (*TrialResult, error) {
	if metric == "" {
		metric, mode = g.Metric, g.Mode
	}
	if metric == "" || (mode != ModeMin && mode != ModeMax) {
		return nil, fmt.Errorf("best result needs a metric and a mode (min or max)")
	}
	if scope != ScopeLast && scope != ScopeAll {
		return nil, fmt.Errorf("best result scope must be %q or %q, got %q", ScopeLast, ScopeAll, scope)
	}
	i := bestTrial(len(g.Trials), metric, mode, func(i int) []map[string]any {
		if scope == ScopeAll {
			return g.Trials[i].History
		}
		return []map[string]any{g.Trials[i].Metrics}
	})
	if i < 0 {
		return nil, fmt.Errorf("%w %q", ErrNoResult, metric)
	}
	return &g.Trials[i], nil
}

// bestTrial returns the index of the one of n trials with the best value of
// metric under mode among the reports of each, or -1 when none reported
// it. The first of equals wins.
func bestTrial(n int, metric, mode string, reports func(i int) []map[string]any) int {
	sign := 1.0
	if mode == ModeMin {
		sign = -1
	}
	best, bestScore := -1, math.Inf(-1)
	for i := range n {
		for _, m := range reports(i) {
			v, ok := storage.Score(storage.Record{Metrics: m}, metric)
			if ok && (best < 0 || sign*v > bestScore) {
				best, bestScore = i, sign*v
			}
		}
	}
	return best
}

// WriteJSON writes the grid as indented JSON.
func (g *ResultGrid) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(g)
}

// WriteCSV writes one row per trial: id, status, iterations, the sampled
// params (config/<path>), the last metrics (metric/<name>), the seconds it
// trained (time_total_s), the best checkpoint and the reason.
func (g *ResultGrid) WriteCSV(w io.Writer) error {
	params, metrics := map[string]bool{}, map[string]bool{}
	for _, t := range g.Trials {
		for k := range t.Params {
			params[k] = true
		}
		for k := range t.Metrics {
			metrics[k] = true
		}
	}
	pk, mk := sortedTrials(params), sortedTrials(metrics)
	cw := csv.NewWriter(w)
	head := []string{"trial", "status", "iterations"}
	for _, k := range pk {
		head = append(head, "config/"+k)
	}
	for _, k := range mk {
		head = append(head, "metric/"+k)
	}
	head = append(head, "time_total_s", "best_checkpoint", "reason")
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, t := range g.Trials {
		row := []string{t.ID, t.Status, strconv.Itoa(t.Iterations)}
		params := paramsNow(t.Config, t.Params)
		for _, k := range pk {
			row = append(row, cell(params[k]))
		}
		for _, k := range mk {
			row = append(row, cell(t.Metrics[k]))
		}
		trained := ""
		if t.TimeTotal > 0 {
			trained = cell(t.TimeTotal)
		}
		row = append(row, trained, t.BestCheckpoint, t.Reason)
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return x
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
