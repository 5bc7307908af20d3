package console

import (
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

func TestBar(t *testing.T) {
	mid := Progress{Unit: "epoch", Done: 12, Total: 20, Rate: 2.5, Elapsed: 5 * time.Second, Metric: "loss=0.0135"}
	cases := []struct {
		name  string
		p     Progress
		width int
		want  string
	}{
		{"midway", mid, 80,
			"epoch 12/20 [==========>       ]  60%  0:05  2.50 epoch/s  ETA 0:03  loss=0.0135"},
		{"wide", mid, 100,
			"epoch 12/20 [======================>               ]  60%  0:05  2.50 epoch/s  ETA 0:03  loss=0.0135"},
		{"narrow drops the bar", mid, 50,
			"epoch 12/20  60%  0:05  2.50 epoch/s  ETA 0:03"},
		{"very narrow is cut", mid, 20, "epoch 12/20  60%  0:"},
		{"no rate yet", Progress{Unit: "step", Done: 0, Total: 1000, Elapsed: 3 * time.Second}, 40,
			"step 0/1000 [>              ]   0%  0:03"},
		{"done", Progress{Unit: "step", Done: 1000, Total: 1000, Rate: 150, Elapsed: 7 * time.Second}, 60,
			"step 1000/1000 [==========] 100%  0:07  150 step/s  ETA 0:00"},
		{"past the goal is the goal", Progress{Unit: "epoch", Done: 25, Total: 20, Elapsed: time.Hour + 2*time.Second}, 44,
			"epoch 20/20 [================] 100%  1:00:02"},
		{"waiting", Progress{Unit: "epoch", Total: 20, Elapsed: 65 * time.Second, Waiting: "waiting for 4 workers to rendezvous and report"}, 80,
			"waiting for 4 workers to rendezvous and report (1:05)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.p.Bar(c.width)
			must.Eq(t, c.want, got)
			must.LessEq(t, c.width, len(got))
		})
	}
}

func TestGoalOf(t *testing.T) {
	cases := []struct {
		config string
		want   Goal
		ok     bool
	}{
		{`{"epochs":20,"lr":0.1}`, Goal{"epoch", 20}, true},
		{`{"max_steps":500}`, Goal{"step", 500}, true},
		{`{"epochs":20,"steps":7}`, Goal{"epoch", 20}, true},
		{`{"epochs":{"grid_search":[1,2]}}`, Goal{}, false},
		{`{"epochs":2.5}`, Goal{}, false},
		{`{"lr":0.1}`, Goal{}, false},
		{`not json`, Goal{}, false},
	}
	for _, c := range cases {
		t.Run(c.config, func(t *testing.T) {
			g, ok := GoalOf([]byte(c.config))
			must.Eq(t, c.ok, ok)
			must.Eq(t, c.want, g)
		})
	}
}

// The tracker counts epochs from the reports' epoch (from 0) and the rate
// between the first report it saw and the latest, by the reports' times.
func TestTracker(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	rec := func(step int64, epoch float64, secs int) storage.Record {
		return storage.Record{Step: step, Time: t0.Add(time.Duration(secs) * time.Second),
			Metrics: map[string]any{"epoch": epoch, "loss": 0.5 / (epoch + 1)}}
	}
	tr := &Tracker{Goal: Goal{"epoch", 10}}
	p := tr.Progress(2*time.Second, "starting workers: 1 of 2 running")
	must.Eq(t, "starting workers: 1 of 2 running", p.Waiting)
	tr.Observe(rec(1, 0, 0))
	p = tr.Progress(3*time.Second, "ignored")
	must.Eq(t, Progress{Unit: "epoch", Done: 1, Total: 10, Elapsed: 3 * time.Second, Metric: "loss=0.5"}, p)
	tr.Observe(rec(5, 4, 2))
	p = tr.Progress(5*time.Second, "")
	must.Eq(t, 5, p.Done)
	must.Eq(t, 2.0, p.Rate)
	must.Eq(t, "loss=0.1", p.Metric)
	must.StrContains(t, p.Bar(90), "ETA 0:03")

	steps := &Tracker{Goal: Goal{"step", 100}, Score: "acc"}
	steps.Observe(storage.Record{Step: 40, Time: t0, Metrics: map[string]any{"acc": 0.9, "epoch": 3.0}})
	p = steps.Progress(time.Second, "")
	must.Eq(t, 40, p.Done)
	must.Eq(t, "acc=0.9", p.Metric)
	must.True(t, strings.HasPrefix(p.Bar(80), "step 40/100 ["))
}
