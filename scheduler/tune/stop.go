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
// at most Value (a loss). Metric TrainingIteration is the report's step
// and TimeTotal the seconds the trial had trained, which every report has.
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

// met says whether rec meets the criterion; a report without the metric,
// or with NaN, meets none.
func (c StopCriterion) met(rec storage.Record) bool {
	v, ok := attr(rec, c.Metric)
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

// watchedAttr is an attribute a setting reads off every report (other
// than the metric, which checkMetric watches): the scheduler's time
// attribute, a stop criterion's metric.
type watchedAttr struct {
	name    string
	setting string // the setting that names it, for the warning
	without string // what happens while no report holds it
}

// watchedAttrs lists the attributes the experiment's settings read that a
// trial must report itself.
func (e *experiment) watchedAttrs() []watchedAttr {
	var w []watchedAttr
	if !builtinAttr(e.cfg.TimeAttr) {
		w = append(w, watchedAttr{e.cfg.TimeAttr, "time_attr", "the scheduler sees every report at time 0"})
	}
	for _, c := range e.cfg.Stop {
		if !builtinAttr(c.Metric) {
			w = append(w, watchedAttr{c.Metric, "stop criterion " + c.String(), "no trial stops on it until one does"})
		}
	}
	return w
}

// checkAttrs warns, once for each, when a report lacks an attribute the
// settings read and no report held it before: a misspelt time_attr or
// stop criterion would otherwise silently do nothing.
func (e *experiment) checkAttrs(metrics map[string]any) {
	for _, a := range e.watchedAttrs() {
		if e.attrSeen[a.name] {
			continue
		}
		if _, ok := metrics[a.name]; ok {
			e.attrSeen[a.name] = true
			continue
		}
		if !e.attrWarned[a.setting] {
			e.attrWarned[a.setting] = true
			err := &MetricError{Metric: a.name, Reported: sortedTrials(metrics)}
			e.log.Warn("a trial reported results without an attribute the settings read", "setting", a.setting, "error", err)
			e.note("warning: %s: %v; %s", a.setting, err, a.without)
		}
	}
}
