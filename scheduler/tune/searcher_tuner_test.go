package tune

import (
	"bytes"
	"context"
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

// The tuner asks a model-based searcher for each trial as a slot frees,
// feeds it every result (ASHA's pruned trials included), ends trials ASHA
// ran to max_t as TERMINATED, and a second Fit resumes with the trials
// made so far.
func TestTunerWithTPE(t *testing.T) {
	dir := t.TempDir()
	run := func(samples int) *ResultGrid {
		g, err := New(&InProcess{Fn: synthetic(0, false, nil)}, lrSpace(9), Config{
			Name: "tpe", StoragePath: dir, NumSamples: samples, MaxConcurrentTrials: 2,
			Metric: "loss", Mode: ModeMin, Seed: 5,
			Search:    TPESettings{NStartupTrials: 3},
			Scheduler: ASHASettings{MaxT: 9, GracePeriod: 1, ReductionFactor: 3},
		}).Fit(context.Background())
		must.NoError(t, err)
		return g
	}
	g := run(10)
	must.SliceLen(t, 10, g.Trials)
	statuses := map[string]int{}
	for _, tr := range g.Trials {
		statuses[tr.Status]++
		if tr.Status == StatusTerminated {
			must.EqOp(t, 9, tr.Iterations)
		}
	}
	must.Positive(t, statuses[StatusTerminated])
	must.Positive(t, statuses[StatusStopped]) // pruned by ASHA
	must.EqOp(t, 10, statuses[StatusTerminated]+statuses[StatusStopped])
	// Resumed with more samples, it makes the rest.
	g = run(12)
	must.SliceLen(t, 12, g.Trials)
}

// An empty search space warns: every trial would run the same config.
func TestEmptySpaceWarns(t *testing.T) {
	var progress bytes.Buffer
	_, err := New(&InProcess{Fn: synthetic(0, false, nil)}, map[string]any{"lr": 0.1, "epochs": 1}, Config{
		Name: "same", StoragePath: t.TempDir(), NumSamples: 2, Progress: &progress}).Fit(context.Background())
	must.NoError(t, err)
	must.StrContains(t, progress.String(), "warning: the search space has no search-space functions")
}

// A restored trial's params, read back from the state file, are adopted
// by the model: a nested choice's value matches the option it came from.
func TestTPEAdopt(t *testing.T) {
	space, err := ParseSpace([]byte(`{"opt": {"choice": ["sgd", {"name": "adam", "beta": {"uniform": [0, 1]}}]}, "x": {"loguniform": [0.001, 1]}}`))
	must.NoError(t, err)
	s := newModelSearch(space, Objective{Metric: "loss", Mode: ModeMin}, 10, 1)
	s.Adopt("a", map[string]any{"opt": map[string]any{"name": "adam", "beta": 0.5}, "opt/1/beta": 0.5, "x": 0.01})
	must.Eq(t, map[string]float64{"opt": 1, "opt/1/beta": 0.5, "x": math.Log(0.01)}, s.byID["a"].params)
}

// BOHB: the bohb searcher with the hyperband scheduler, end to end: every
// trial ends, those HyperBand ran to max_t TERMINATED, the others STOPPED
// short of it.
func TestTunerWithBOHB(t *testing.T) {
	g, err := New(&InProcess{Fn: synthetic(0, false, nil)}, lrSpace(9), Config{
		Name: "bohb", StoragePath: t.TempDir(), NumSamples: 14, MaxConcurrentTrials: 2,
		Metric: "loss", Mode: ModeMin, Seed: 2,
		Search:    BOHBSettings{},
		Scheduler: HyperBandSettings{MaxT: 9, ReductionFactor: 3},
	}).Fit(context.Background())
	must.NoError(t, err)
	must.SliceLen(t, 14, g.Trials)
	stopped := 0
	for _, tr := range g.Trials {
		switch tr.Status {
		case StatusTerminated:
			must.EqOp(t, 9, tr.Iterations)
		case StatusStopped:
			must.Less(t, 9, tr.Iterations)
			stopped++
		default:
			t.Fatalf("%s is %s", tr.ID, tr.Status)
		}
	}
	must.Positive(t, stopped)
}
