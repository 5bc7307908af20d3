package tune

import (
	"fmt"
	"math"
)

func init() {
	registerScheduler("median", true, func() SchedulerSettings { return &MedianSettings{} })
}

// MedianSettings are the median stopping rule's settings (train.hcl's
// scheduler { type = "median" }); zero values are the defaults.
type MedianSettings struct {
	// GracePeriod: no trial stops at a time below it (default 1).
	GracePeriod float64 `json:"grace_period,omitempty"`
	// MinSamplesRequired is how many other trials must have reached the
	// same time before one is compared with them (default 3).
	MinSamplesRequired int `json:"min_samples_required,omitempty"`
}

// Kind is "median".
func (MedianSettings) Kind() string { return "median" }

// Build returns a median stopping scheduler for o.
func (s MedianSettings) Build(o Objective, _ uint64) (Scheduler, error) {
	return NewMedian(MedianConfig{Objective: o, MedianSettings: s})
}

// validate reports every problem of the settings; given are the settings
// written (a 0 there is no default).
func (s MedianSettings) validate(given givenKeys) error {
	var p problems
	p.positive(given, namedFloat{"grace_period", s.GracePeriod})
	if s.MinSamplesRequired < 0 || s.MinSamplesRequired == 0 && given["min_samples_required"] {
		p.addf("min_samples_required", "must be at least 1; got %d", s.MinSamplesRequired)
	}
	return p.err()
}

// MedianConfig configures the median stopping rule.
type MedianConfig struct {
	Objective
	MedianSettings
}

// Median is the median stopping rule (Ray's MedianStoppingRule, after
// Google Vizier): at time t past the grace period, a trial whose best score
// so far is below the median, over the other trials that reached t, of
// their running mean score up to t, is stopped.
type Median struct {
	cfg     MedianConfig
	results map[string][]medianPoint
	stopped map[string]bool
}

type medianPoint struct{ t, score float64 }

// NewMedian returns a median stopping scheduler.
func NewMedian(cfg MedianConfig) (*Median, error) {
	if err := cfg.Objective.validate(); err != nil {
		return nil, fmt.Errorf("median stopping: %w", err)
	}
	if cfg.GracePeriod == 0 {
		cfg.GracePeriod = 1
	}
	if cfg.MinSamplesRequired == 0 {
		cfg.MinSamplesRequired = 3
	}
	return &Median{cfg: cfg, results: map[string][]medianPoint{}, stopped: map[string]bool{}}, nil
}

// OnTrialAdd does nothing.
func (m *Median) OnTrialAdd(string, map[string]any) {}

// OnResult records the result and applies the rule.
func (m *Median) OnResult(r Result) Decision {
	if m.stopped[r.Trial] {
		return Decision{Action: Stop, Reason: "already stopped"}
	}
	score := m.cfg.score(r.Value)
	if !math.IsNaN(score) {
		m.results[r.Trial] = append(m.results[r.Trial], medianPoint{r.Time, score})
	}
	if r.Time < m.cfg.GracePeriod {
		return Decision{Action: Continue, Reason: "in grace period"}
	}
	var means []float64
	for _, other := range sortedTrials(m.results) {
		pts := m.results[other]
		if other == r.Trial || len(pts) == 0 || pts[len(pts)-1].t < r.Time {
			continue
		}
		sum, n := 0.0, 0
		for _, p := range pts {
			if p.t <= r.Time {
				sum += p.score
				n++
			}
		}
		if n > 0 {
			means = append(means, sum/float64(n))
		}
	}
	if len(means) < m.cfg.MinSamplesRequired {
		return Decision{Action: Continue, Reason: fmt.Sprintf("%d of %d trials to compare with", len(means), m.cfg.MinSamplesRequired)}
	}
	median, _ := percentile(means, 50)
	best := math.Inf(-1)
	for _, p := range m.results[r.Trial] {
		best = max(best, p.score)
	}
	if best < median && r.Time > m.cfg.GracePeriod {
		m.stopped[r.Trial] = true
		return Decision{Action: Stop, Reason: fmt.Sprintf("best %s %.6g worse than median %.6g of %d running means", m.cfg.Metric, m.cfg.score(best), m.cfg.score(median), len(means))}
	}
	return Decision{Action: Continue, Reason: fmt.Sprintf("best %s %.6g vs median %.6g of %d running means", m.cfg.Metric, m.cfg.score(best), m.cfg.score(median), len(means))}
}

// OnTrialComplete keeps the trial's results: finished trials still count.
func (m *Median) OnTrialComplete(string) {}
