package tune

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// With UnlimitedSamples the grid repeats as often as maxVariants allows.
func TestGeneratorUnlimited(t *testing.T) {
	space := map[string]any{"lr": GridSearch(0.1, 0.01, 0.001), "momentum": Uniform(0, 1)}
	g, err := NewGenerator(space, SearchRandom, UnlimitedSamples, 3)
	must.NoError(t, err)
	must.EqOp(t, maxVariants/3*3, g.Total())
	for i := range 7 {
		v, ok := g.Next()
		must.True(t, ok)
		must.Eq[any](t, []float64{0.1, 0.01, 0.001}[i%3], v.Params["lr"])
	}
}

// num_samples = -1: trials are sampled as slots free until the time budget
// is spent, none listed ahead; a resumed experiment goes on with the
// sequence rather than repeat its start, and one whose budget is spent
// makes no more.
func TestUnlimitedSamples(t *testing.T) {
	for _, search := range []SearcherSettings{nil, TPESettings{NStartupTrials: 2}} {
		name := "random"
		if search != nil {
			name = search.Kind()
		}
		t.Run(name, func(t *testing.T) {
			cfg := Config{Name: "unl", StoragePath: t.TempDir(), NumSamples: UnlimitedSamples, MaxConcurrentTrials: 2,
				Metric: "loss", Mode: ModeMin, TimeBudget: 1200 * time.Millisecond, Search: search, Seed: 7}
			tn := func() *Tuner { return New(&InProcess{Fn: synthetic(10*time.Millisecond, false, nil)}, lrSpace(3), cfg) }

			// Interrupted a third of the way: the trials made so far stay.
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			defer cancel()
			g, err := tn().Fit(ctx)
			must.ErrorIs(t, err, context.DeadlineExceeded)
			first := len(g.Trials)
			must.Greater(t, 2, first) // more than the slots: made as they free
			for _, tr := range g.Trials {
				must.NotEq(t, StatusStopped, tr.Status) // interrupted, not spent
			}

			var progress bytes.Buffer
			cfg.Progress, cfg.ProgressInterval = &progress, 100*time.Millisecond
			g, err = tn().Fit(context.Background())
			must.NoError(t, err)
			must.Greater(t, first, len(g.Trials))
			must.StrContains(t, progress.String(), "== unl: the time budget (1.2s) is spent: the running trials stop and no more start\n")
			must.RegexMatch(t, regexp.MustCompile(`(?m)^== unl: \d+ trials \([^)]+\); [01]s of the 1.2s budget left$`), progress.String())
			lrs := map[string]string{}
			for _, tr := range g.Trials {
				switch tr.Status {
				case StatusTerminated:
					must.EqOp(t, 3, tr.Iterations)
				case StatusStopped:
					must.EqOp(t, "time budget spent", tr.Reason)
				default:
					t.Fatalf("%s is %s: every trial either ran its config or was stopped by the budget", tr.ID, tr.Status)
				}
				key := fmt.Sprint(tr.Config["lr"])
				must.MapNotContainsKey(t, lrs, key, must.Sprintf("%s repeats %s's config", tr.ID, lrs[key]))
				lrs[key] = tr.ID
			}

			progress.Reset()
			g, err = tn().Fit(context.Background())
			must.NoError(t, err)
			must.SliceLen(t, len(lrs), g.Trials) // the budget is spent: no more trials
			must.StrContains(t, progress.String(), "== unl: the time budget (1.2s) was spent by earlier runs: no trial starts\n")
		})
	}
}

func TestUnlimitedSamplesNeedATimeBudget(t *testing.T) {
	_, err := New(&InProcess{Fn: synthetic(0, false, nil)}, lrSpace(1),
		Config{Name: "unl", StoragePath: t.TempDir(), NumSamples: UnlimitedSamples}).Fit(context.Background())
	must.ErrorContains(t, err, "set TimeBudget")
	_, err = New(&InProcess{Fn: synthetic(0, false, nil)}, lrSpace(1),
		Config{Name: "unl", StoragePath: t.TempDir(), NumSamples: -2}).Fit(context.Background())
	must.ErrorContains(t, err, "got -2")
}

// Raising num_samples of a finished experiment runs the new trials only,
// each with a config of its own: the generator goes on past the variants
// of the trials it restored instead of handing them out again.
func TestMoreSamplesOnResume(t *testing.T) {
	cfg := Config{Name: "more", StoragePath: t.TempDir(), NumSamples: 3, Metric: "loss", Mode: ModeMin, Seed: 3}
	var starts sync.Map
	tn := func() *Tuner { return New(&InProcess{Fn: synthetic(0, false, &starts)}, lrSpace(2), cfg) }
	g, err := tn().Fit(context.Background())
	must.NoError(t, err)
	must.SliceLen(t, 3, g.Trials)

	cfg.NumSamples = 5
	g, err = tn().Fit(context.Background())
	must.NoError(t, err)
	must.SliceLen(t, 5, g.Trials)
	lrs := map[any]string{}
	for _, tr := range g.Trials {
		must.EqOp(t, StatusTerminated, tr.Status)
		n, _ := starts.Load(tr.ID)
		must.EqOp(t, 1, *n.(*int), must.Sprintf("%s started again", tr.ID))
		must.MapNotContainsKey(t, lrs, tr.Config["lr"], must.Sprintf("%s repeats %s's config", tr.ID, lrs[tr.Config["lr"]]))
		lrs[tr.Config["lr"]] = tr.ID
	}
	// The same as a fresh experiment of 5 would have sampled.
	fresh := cfg
	fresh.StoragePath = t.TempDir()
	g2, err := New(&InProcess{Fn: synthetic(0, false, nil)}, lrSpace(2), fresh).Fit(context.Background())
	must.NoError(t, err)
	for i := range g2.Trials {
		must.Eq(t, g2.Trials[i].Config, g.Trials[i].Config)
	}
}
