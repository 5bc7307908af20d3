package tune

import (
	"fmt"
	"math"
	"strconv"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Stop criteria (Ray's RunConfig(stop={...})): a trial ends, TERMINATED,
// at its first report that meets any of them, whichever comes first.

// StopCriterion ends a trial at its first report whose Metric has reached
// Value: at least Value (the meaning of Ray's stop dict), or, with AtMost,
// at most Value (a loss). Metric TrainingIteration is the report's step,
// which every report has.
type StopCriterion struct {
	Metric string
	Value  float64
	AtMost bool
}

func (c StopCriterion) String() string {
	op := ">="
	if c.AtMost {
		op = "<="
	}
	return c.Metric + " " + op + " " + strconv.FormatFloat(c.Value, 'g', -1, 64)
}

// value reads the criterion's metric off a report.
func (c StopCriterion) value(rec storage.Record) (float64, bool) {
	if c.Metric == TrainingIteration {
		return float64(rec.Step), true
	}
	return storage.Score(rec, c.Metric)
}

// met says whether rec meets the criterion; a report without the metric,
// or with NaN, meets none.
func (c StopCriterion) met(rec storage.Record) bool {
	v, ok := c.value(rec)
	if !ok || math.IsNaN(v) {
		return false
	}
	if c.AtMost {
		return v <= c.Value
	}
	return v >= c.Value
}

// stopMet returns the first of crit that rec meets.
func stopMet(crit []StopCriterion, rec storage.Record) (StopCriterion, bool) {
	for _, c := range crit {
		if c.met(rec) {
			return c, true
		}
	}
	return StopCriterion{}, false
}

func validateStop(crit []StopCriterion) error {
	for _, c := range crit {
		if c.Metric == "" {
			return fmt.Errorf("tune: a stop criterion needs a metric")
		}
		if math.IsNaN(c.Value) {
			return fmt.Errorf("tune: stop criterion on %s: the value is NaN", c.Metric)
		}
	}
	return nil
}

// decide asks the scheduler about a trial's result, then stops the trial
// as finished when its report meets a stop criterion. The scheduler sees
// the result either way, so that it counts in its rungs and medians as
// Ray's schedulers count a trial's last result.
func (e *experiment) decide(r Result, rec storage.Record) Decision {
	d := e.sched.OnResult(r)
	if c, ok := stopMet(e.cfg.Stop, rec); ok {
		return Decision{Action: Stop, Finished: true, Reason: "reached stop " + c.String()}
	}
	return d
}

// checkStop warns, once for each, when a report lacks a stop criterion's
// metric and no report held it before: a misspelt criterion would never
// stop a trial.
func (e *experiment) checkStop(metrics map[string]any) {
	for _, c := range e.cfg.Stop {
		if c.Metric == TrainingIteration || e.stopSeen[c.Metric] {
			continue
		}
		if _, ok := metrics[c.Metric]; ok {
			e.stopSeen[c.Metric] = true
			continue
		}
		if !e.stopWarned[c.Metric] {
			e.stopWarned[c.Metric] = true
			err := &MetricError{Metric: c.Metric, Reported: sortedTrials(metrics)}
			e.log.Warn("a trial reported results without a stop criterion's metric", "error", err)
			e.note("warning: stop criterion %s: %v; no trial stops on it until one does", c, err)
		}
	}
}
