package tune

import (
	"fmt"
	"math"
	"slices"
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

// PlateauStop ends a trial once its metric has stopped moving (Ray's
// TrialPlateauStopper): from its GracePeriod-th report on, when the
// standard deviation of the last NumResults values of Metric is below
// Std.
type PlateauStop struct {
	Metric      string
	Std         float64
	NumResults  int
	GracePeriod int
}

func (p *PlateauStop) validate() error {
	switch {
	case p == nil:
		return nil
	case p.Metric == "":
		return fmt.Errorf("tune: the plateau stop needs a metric")
	case !(p.Std > 0):
		return fmt.Errorf("tune: the plateau stop's std must be positive, got %v", p.Std)
	case p.NumResults < 2:
		return fmt.Errorf("tune: the plateau stop needs at least 2 results to compare, got %d", p.NumResults)
	}
	return nil
}

// plateau is one trial's record for a PlateauStop: how many values of the
// metric it reported, and the last NumResults of them.
type plateau struct {
	seen int
	last []float64
}

// add takes a value and says whether the trial has plateaued, with the
// spread it found.
func (pl *plateau) add(p *PlateauStop, v float64) (float64, bool) {
	pl.seen++
	pl.last = append(pl.last, v)
	if len(pl.last) > p.NumResults {
		pl.last = pl.last[1:]
	}
	if pl.seen < p.GracePeriod || len(pl.last) < p.NumResults {
		return 0, false
	}
	sd := stddev(pl.last)
	return sd, sd < p.Std
}

// stddev is the population standard deviation of xs (numpy's std, which
// Ray's stopper uses).
func stddev(xs []float64) float64 {
	var mean float64
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss / float64(len(xs)))
}

// decide asks the scheduler about a trial's result, then stops the trial
// as finished when its report meets a stop criterion, or its metric has
// plateaued. The scheduler sees the result either way, so that it counts
// in its rungs and medians as Ray's schedulers count a trial's last
// result.
func (e *experiment) decide(r Result, rec storage.Record) Decision {
	d := e.sched.OnResult(r)
	if c, ok := stopMet(e.cfg.Stop, rec); ok {
		return Decision{Action: Stop, Finished: true, Reason: "reached stop " + c.String()}
	}
	if p := e.cfg.Plateau; p != nil {
		if v, ok := attr(rec, p.Metric); ok && !math.IsNaN(v) {
			pl := e.plateaus[r.Trial]
			if pl == nil {
				pl = &plateau{}
				e.plateaus[r.Trial] = pl
			}
			if sd, flat := pl.add(p, v); flat {
				return Decision{Action: Stop, Finished: true, Reason: fmt.Sprintf("plateaued: %s varied by %.3g (std) over its last %d reports, under %g",
					p.Metric, sd, p.NumResults, p.Std)}
			}
		}
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

// watchedAttrs lists the attributes cfg's settings read that a trial must
// report itself, other than the metric (checkMetric's).
func watchedAttrs(cfg Config) []watchedAttr {
	w := []watchedAttr{{cfg.TimeAttr, "time_attr", "the scheduler sees every report at time 0"}}
	for _, c := range cfg.Stop {
		w = append(w, watchedAttr{c.Metric, "stop criterion " + c.String(), "no trial stops on it until one does"})
	}
	if p := cfg.Plateau; p != nil {
		w = append(w, watchedAttr{p.Metric, "stop_on_plateau", "no trial stops on a plateau until one does"})
	}
	return slices.DeleteFunc(w, func(a watchedAttr) bool { return builtinAttr(a.name) || a.name == cfg.Metric })
}

// checkAttrs warns, once for each, when a report lacks an attribute the
// settings read and no report held it before: a misspelt time_attr or
// stop criterion would otherwise silently do nothing.
func (e *experiment) checkAttrs(metrics map[string]any) {
	for _, a := range e.watched {
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
