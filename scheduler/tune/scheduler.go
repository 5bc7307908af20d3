package tune

import (
	"fmt"
	"math"
	"sort"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Modes of the metric.
const (
	ModeMin = "min" // lower is better
	ModeMax = "max" // higher is better
)

// TrainingIteration is the default time attribute: the report's step, which
// counts reports across restarts of a trial.
const TrainingIteration = "training_iteration"

// TimeTotal is the attribute of the seconds a trial had trained when it
// reported (storage.Record.TimeTotal), as Ray's results carry it: for
// time_attr (Ray's PBT measures its perturbation interval in it) and
// stop criteria. A trial restarted from a checkpoint, its own or a PBT
// donor's, goes on from the time the checkpoint had trained.
const TimeTotal = "time_total_s"

// attr reads attribute name off a report: TrainingIteration and
// TimeTotal from the record itself (TimeTotal from the metrics when the
// record has none: a writer of an earlier version), any other from its
// metrics.
func attr(rec storage.Record, name string) (float64, bool) {
	switch {
	case name == TrainingIteration:
		return float64(rec.Step), true
	case name == TimeTotal && rec.TimeTotal > 0:
		return rec.TimeTotal.Seconds(), true
	}
	return storage.Score(rec, name)
}

// builtinAttr says whether every report has attribute name.
func builtinAttr(name string) bool { return name == TrainingIteration || name == TimeTotal }

// Result is one report of a trial as a scheduler sees it.
type Result struct {
	Trial string
	// Time is the value of the time attribute (TrainingIteration by default).
	Time float64
	// Value is the metric's value; NaN when the report lacks it.
	Value float64
	// Checkpoint is true when the report committed a checkpoint.
	Checkpoint bool
}

// Action is what a scheduler tells the tuner to do with a trial.
type Action int

// Actions.
const (
	// Continue lets the trial run on.
	Continue Action = iota
	// Stop ends the trial early (or at max_t).
	Stop
	// Exploit stops the trial, replaces its checkpoint with the donor's
	// latest one and restarts it with Decision.Config (PBT).
	Exploit
)

func (a Action) String() string {
	switch a {
	case Continue:
		return "CONTINUE"
	case Stop:
		return "STOP"
	case Exploit:
		return "EXPLOIT"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is a scheduler's answer to one result.
type Decision struct {
	Action Action
	// Reason explains the decision in words (for logs and transcripts).
	Reason string
	// Donor is the trial whose checkpoint an Exploit clones.
	Donor string
	// Config is the recipient's new config for an Exploit.
	Config map[string]any
	// Finished is set with Stop when the trial reached its end (max_t):
	// it ends TERMINATED, not STOPPED, and counts as complete.
	Finished bool
}

// Scheduler is a trial scheduler (Ray's TrialScheduler). Its decisions are
// a pure function of the calls it received, in order: it does no I/O and
// reads no clock, so a scripted sequence of calls always gives the same
// transcript. The tuner calls it from one goroutine.
type Scheduler interface {
	// OnTrialAdd registers a trial and its config before its first result.
	OnTrialAdd(trial string, config map[string]any)
	// OnResult takes one result and decides.
	OnResult(r Result) Decision
	// OnTrialComplete says a trial ended (finished, stopped or failed for
	// good); it reports no more results.
	OnTrialComplete(trial string)
}

// Objective is the metric a scheduler optimizes and the attribute it
// measures progress in.
type Objective struct {
	Metric   string
	Mode     string // ModeMin or ModeMax
	TimeAttr string // TrainingIteration when empty
}

// score turns a metric value into "higher is better", and back.
func (o Objective) score(v float64) float64 {
	if o.Mode == ModeMin {
		return -v
	}
	return v
}

func (o Objective) validate() error {
	if o.Metric == "" {
		return fmt.Errorf("scheduler needs a metric")
	}
	if o.Mode != ModeMin && o.Mode != ModeMax {
		return fmt.Errorf("mode must be %q or %q, got %q", ModeMin, ModeMax, o.Mode)
	}
	return nil
}

func init() {
	registerScheduler("fifo", false, func() SchedulerSettings { return &FIFO{} })
}

// FIFO runs every trial to completion (Ray's FIFOScheduler). It is its own
// settings: it has none.
type FIFO struct{}

// Kind is "fifo".
func (FIFO) Kind() string { return "fifo" }

// Build returns FIFO.
func (FIFO) Build(Objective, uint64) (Scheduler, error) { return FIFO{}, nil }

// OnTrialAdd does nothing.
func (FIFO) OnTrialAdd(string, map[string]any) {}

// OnResult always continues.
func (FIFO) OnResult(Result) Decision { return Decision{Action: Continue} }

// OnTrialComplete does nothing.
func (FIFO) OnTrialComplete(string) {}

// percentile is numpy's default (linear interpolation) percentile of vals,
// p in [0, 100]. NaNs are left out; ok is false when nothing is left.
func percentile(vals []float64, p float64) (float64, bool) {
	xs := make([]float64, 0, len(vals))
	for _, v := range vals {
		if !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return 0, false
	}
	sort.Float64s(xs)
	pos := p / 100 * float64(len(xs)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return xs[lo] + (xs[hi]-xs[lo])*(pos-float64(lo)), true
}

// sortedTrials returns the keys of m in order.
func sortedTrials[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
