package tune

import (
	"fmt"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Trial tailing: reading each trial's new progress records as they are
// written, and handing them to the scheduler.

// poll reads the trial's new records and lets the scheduler decide on each.
func (e *experiment) poll(id string) {
	rt := e.rt[id]
	recs, all, err := e.readTail(&rt.tail, id)
	if err != nil {
		e.log.Warn("cannot read trial progress", "trial", id, "error", err)
		return
	}
	ts := e.trial(id)
	if all != nil { // the whole history, maybe rolled back: count it as it now is
		ts.Iterations = countOwn(all) - countOwn(recs)
	}
	for _, rec := range recs {
		if _, cloned := rec.Metrics[ClonedFrom]; cloned {
			continue
		}
		ts.Iterations++
		ts.LastResult = rec.Metrics
		ts.TimeTotal, _ = attr(rec, TimeTotal)
		e.reportedSinceSave = true
		e.checkMetric(id, rec.Metrics)
		e.checkAttrs(rec.Metrics)
		if rt.stopping || rt.cancel == nil {
			continue
		}
		if e.failFast(id, rec.Metrics) {
			return
		}
		r := e.result(id, rec)
		d := e.decide(r, rec)
		rt.last, rt.reported = r, true
		e.search.OnResult(id, r)
		switch d.Action {
		case Stop:
			e.log.Debug("stopping trial", "trial", id, "reason", d.Reason)
			rt.stopping, rt.stopReason, rt.finished = true, d.Reason, d.Finished
			rt.cancel()
		case Exploit:
			e.log.Debug("exploiting", "trial", id, "donor", d.Donor, "reason", d.Reason)
			rt.stopping, rt.exploit = true, &d
			rt.cancel()
		}
	}
}

// checkMetric warns, once, when a trial reports results without the
// metric before any report held it: a misspelt metric leaves the scheduler
// nothing to go by, and Fit ends with a MetricError if no report ever
// holds it.
func (e *experiment) checkMetric(id string, metrics map[string]any) {
	if e.cfg.Metric == "" || e.metricSeen {
		return
	}
	if _, ok := metrics[e.cfg.Metric]; ok {
		e.metricSeen = true
		return
	}
	if !e.metricWarned {
		e.metricWarned = true
		err := &MetricError{Metric: e.cfg.Metric, Reported: sortedTrials(metrics)}
		e.log.Warn("a trial reported results without the metric", "trial", id, "error", err)
		e.note("warning: %v", err)
	}
}

// progressTail follows a trial's records through storage (a Follower: on
// a directory a stat per read, and one read when the file grew; on an
// object store a listing of the segments after the last one read). A
// trial that restarts rolls its history back to its latest checkpoint;
// the tail then gets the whole history again and skips the records it
// had read, the older ones.
type progressTail struct {
	f    *storage.Follower // open while its trial runs
	last time.Time         // time of the newest record read
}

// close releases the Follower until the next read, which opens another.
func (t *progressTail) close() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
}

// countOwn counts the records a trial reported itself (not PBT clones).
func countOwn(recs []storage.Record) int {
	n := 0
	for _, r := range recs {
		if _, cloned := r.Metrics[ClonedFrom]; !cloned {
			n++
		}
	}
	return n
}

// failFast stops the experiment once every running trial has reported and
// none of the reports held the metric: a misspelt metric would otherwise
// leave the scheduler and searcher blind until every trial ran to its
// end. It says which metrics the trials do report.
func (e *experiment) failFast(id string, metrics map[string]any) bool {
	e.rt[id].reported = true
	if e.cfg.Metric == "" || e.metricSeen || e.metricMissing != nil {
		return false
	}
	for _, rt := range e.rt {
		if rt.cancel != nil && !rt.stopping && !rt.reported && !rt.waiting {
			return false
		}
	}
	e.metricMissing = &MetricError{Metric: e.cfg.Metric, Reported: sortedTrials(metrics)}
	e.log.Error("no trial reports the metric, stopping the experiment", "error", e.metricMissing)
	e.note("stopping: %v", e.metricMissing)
	e.stopEverything("metric " + e.cfg.Metric + " never reported")
	return true
}

// readTail reads trial id's records written since t last read. When
// the history came whole (the first read of a new Follower, or one after
// a rollback), all is that history (not nil, even when empty) and recs
// only its records newer than those read before; otherwise all is nil.
func (e *experiment) readTail(t *progressTail, id string) (recs, all []storage.Record, err error) {
	whole := t.f == nil
	if whole {
		f, err := storage.Follow(e.ctx, e.trials.root, id, e.trials.opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("read trial %s: %w", id, err)
		}
		t.f = f
	}
	got, reset, err := t.f.NextRecords()
	if err != nil {
		return nil, nil, fmt.Errorf("read trial %s: %w", id, err)
	}
	if !whole && !reset {
		for _, r := range got {
			t.last = laterOf(t.last, r.Time)
		}
		return got, nil, nil
	}
	before := t.last
	for _, r := range got {
		if r.Time.After(before) {
			recs = append(recs, r)
			t.last = laterOf(t.last, r.Time)
		}
	}
	if got == nil {
		got = []storage.Record{}
	}
	return recs, got, nil
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
