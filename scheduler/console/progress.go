package console

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Progress is a run's progress as a bar shows it.
type Progress struct {
	// Unit is what Done and Total count: "epoch" or "step".
	Unit        string
	Done, Total int64
	// Rate is Units per second, 0 until two reports tell it.
	Rate float64
	// Elapsed is the time since the launch.
	Elapsed time.Duration
	// Metric is the last report's score (as "loss=0.0135"), or "".
	Metric string
	// Waiting, before the first report, says what the run waits for.
	Waiting string
}

// Bar renders p in at most width columns: a bar with the count, the
// percentage, the rate and the time left, the metric when it fits; before
// the first report, what the run waits for and for how long.
func (p Progress) Bar(width int) string {
	if p.Waiting != "" {
		return fit(fmt.Sprintf("%s (%s)", p.Waiting, clock(p.Elapsed)), width)
	}
	done := min(max(p.Done, 0), p.Total)
	left := fmt.Sprintf("%s %d/%d ", p.Unit, done, p.Total)
	pct := 0
	if p.Total > 0 {
		pct = int(done * 100 / p.Total)
	}
	right := fmt.Sprintf(" %3d%%  %s", pct, clock(p.Elapsed))
	if p.Rate > 0 {
		right += fmt.Sprintf("  %s %s/s  ETA %s", rate(p.Rate), p.Unit, clock(time.Duration(float64(p.Total-done)/p.Rate*float64(time.Second))))
	}
	if p.Metric != "" && width-len(left)-len(right)-len(p.Metric)-2-2 >= minBar {
		right += "  " + p.Metric
	}
	inner := width - len(left) - len(right) - 2
	if inner < minBar {
		return fit(strings.TrimSpace(left)+right, width)
	}
	filled := 0
	if p.Total > 0 {
		filled = int(int64(inner) * done / p.Total)
	}
	bar := strings.Repeat("=", filled)
	if filled < inner {
		bar += ">" + strings.Repeat(" ", inner-filled-1)
	}
	return left + "[" + bar + "]" + right
}

// minBar is the narrowest bar worth drawing.
const minBar = 10

// fit cuts s to width columns (the renderer writes ASCII only).
func fit(s string, width int) string {
	if width > 0 && len(s) > width {
		return s[:width]
	}
	return s
}

// clock is d as m:ss, or h:mm:ss from an hour on.
func clock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// rate writes a rate with three significant digits or so.
func rate(r float64) string {
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f", r)
	case r >= 10:
		return fmt.Sprintf("%.1f", r)
	}
	return fmt.Sprintf("%.2f", r)
}

// Goal is how long a run trains as its config says: a number of epochs or
// of steps.
type Goal struct {
	Unit  string // "epoch" or "step"
	Total int64
}

// GoalOf reads the goal from a run's config (JSON): "epochs", else
// "steps", "max_steps", "num_steps" or "total_steps". ok is false when the
// config gives none, and the run has no bar.
func GoalOf(config []byte) (g Goal, ok bool) {
	var c map[string]any
	if json.Unmarshal(config, &c) != nil {
		return Goal{}, false
	}
	for _, k := range []string{"epochs", "steps", "max_steps", "num_steps", "total_steps"} {
		if n, isNum := c[k].(float64); isNum && n > 0 && n == float64(int64(n)) {
			unit := "step"
			if k == "epochs" {
				unit = "epoch"
			}
			return Goal{Unit: unit, Total: int64(n)}, true
		}
	}
	return Goal{}, false
}

// Tracker turns a run's reports into its Progress. It is pure: the caller
// feeds it the reports it reads and the time.
type Tracker struct {
	Goal  Goal
	Score string // the metric to show (a checkpoint's score attribute), or "" for loss

	first, last storage.Record
	seen        bool
}

// Observe takes the run's latest report.
func (t *Tracker) Observe(r storage.Record) {
	if !t.seen {
		t.first, t.seen = r, true
	}
	t.last = r
}

// Progress is the run's progress at elapsed since the launch; waiting
// says what the run waits for until its first report.
func (t *Tracker) Progress(elapsed time.Duration, waiting string) Progress {
	p := Progress{Unit: t.Goal.Unit, Total: t.Goal.Total, Elapsed: elapsed}
	if !t.seen {
		p.Waiting = waiting
		return p
	}
	p.Done = t.done(t.last)
	if dt := t.last.Time.Sub(t.first.Time).Seconds(); dt > 0 {
		p.Rate = float64(p.Done-t.done(t.first)) / dt
	}
	score := t.Score
	if score == "" {
		score = "loss"
	}
	if v, ok := t.last.Metrics[score].(float64); ok {
		p.Metric = fmt.Sprintf("%s=%.4g", score, v)
	}
	return p
}

// done is how far a report says the run is: the epochs finished (a report
// names its epoch counting from 0), or its step.
func (t *Tracker) done(r storage.Record) int64 {
	if t.Goal.Unit == "epoch" {
		if e, ok := r.Metrics["epoch"].(float64); ok {
			return int64(e) + 1
		}
	}
	return r.Step
}
