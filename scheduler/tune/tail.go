package tune

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Trial tailing: reading each trial's new progress records as they are
// written, and handing them to the scheduler.

// poll reads the trial's new records and lets the scheduler decide on each.
func (e *experiment) poll(id string) {
	rt := e.rt[id]
	recs, rewritten, err := e.readTail(&rt.tail, id)
	if err != nil {
		e.log.Warn("cannot read trial progress", "trial", id, "error", err)
		return
	}
	ts := e.trial(id)
	if rewritten { // rolled back: count the history as it now is
		all, err := e.readAll(id)
		if err != nil {
			e.log.Warn("cannot read trial progress", "trial", id, "error", err)
			return
		}
		ts.Iterations = countOwn(all) - countOwn(recs)
	}
	for _, rec := range recs {
		if _, cloned := rec.Metrics[ClonedFrom]; cloned {
			continue
		}
		ts.Iterations++
		ts.LastResult = rec.Metrics
		e.checkMetric(id, rec.Metrics)
		if rt.stopping || rt.cancel == nil {
			continue
		}
		if e.failFast(id, rec.Metrics) {
			return
		}
		r := e.result(id, rec)
		d := e.sched.OnResult(r)
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

// progressTail follows a growing progress.jsonl. A trial that restarts
// rolls its history back to its latest checkpoint (storage TruncateAfter
// replaces the file with a shorter one); the tail notices the new file and
// skips the records it had already read, which are the older ones. The
// file stays open between reads while its trial runs: a read is then a
// stat of the path (has the file been replaced?) and, when it grew, one
// positioned read.
type progressTail struct {
	offset int64     // bytes of the current file consumed
	ino    uint64    // the current file's inode
	last   time.Time // time of the newest record read
	f      *os.File  // the current file, open while its trial runs

	// On an object store (readTail): the trial's run, open while its
	// trial runs, and how many of its records were read.
	st   storage.RunStore
	seen int
}

func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// read returns the records written since the last read, and whether the
// file was rewritten since.
func (t *progressTail) read(path string) (recs []storage.Record, rewritten bool, err error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("progress file %s is not a regular file (%v)", path, fi.Mode().Type())
	}
	size := fi.Size()
	if ino := inode(fi); t.f == nil || ino == 0 || ino != t.ino {
		t.close()
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if fi, err = f.Stat(); err != nil { // the file opened, which may be newer than the one stat saw
			f.Close()
			return nil, false, err
		}
		if !fi.Mode().IsRegular() {
			f.Close()
			return nil, false, fmt.Errorf("progress file %s is not a regular file (%v)", path, fi.Mode().Type())
		}
		ino = inode(fi)
		rewritten = t.ino != 0 && ino != t.ino
		t.f, t.ino, size = f, ino, fi.Size()
	}
	if size < t.offset {
		rewritten = true
	}
	if rewritten {
		t.offset = 0
	}
	if size == t.offset {
		return nil, rewritten, nil
	}
	// Stream what was appended, a line at a time: a file that grew huge
	// is never held in memory whole.
	var out []storage.Record
	used, err := storage.ScanProgress(io.NewSectionReader(t.f, t.offset, size-t.offset), func(r storage.Record) error {
		if rewritten && !r.Time.After(t.last) {
			return nil // read before the rollback
		}
		out = append(out, r)
		if r.Time.After(t.last) {
			t.last = r.Time
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", path, err)
	}
	t.offset += used
	return out, rewritten, nil
}

// close closes the file until the next read (which reopens it and, from
// the inode, tells whether it was replaced in the meantime).
func (t *progressTail) close() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
	if t.st != nil {
		t.st.Close()
		t.st = nil
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

// readProgress reads every complete record of a progress file (none when
// it does not exist), streaming it through storage's reader.
func readProgress(path string) ([]storage.Record, error) {
	recs, err := storage.ReadProgressFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return recs, err
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

// readTail reads trial id's records written since t last read: from its
// progress file when the trials are kept in the experiment directory (a
// stat, and one read when it grew), else through storage, whose reader
// follows an object store's progress segments by cursor.
func (e *experiment) readTail(t *progressTail, id string) ([]storage.Record, bool, error) {
	if !e.trials.remote() {
		return t.read(e.progressPath(id))
	}
	if t.st == nil {
		st, err := e.trials.open(e.ctx, id, storage.Policy{})
		if err != nil {
			return nil, false, err
		}
		t.st = st
	}
	all, err := t.st.Records()
	if err != nil {
		return nil, false, fmt.Errorf("read trial %s: %w", id, err)
	}
	rewritten := len(all) < t.seen
	if rewritten {
		t.seen = 0
	}
	var out []storage.Record
	for _, r := range all[t.seen:] {
		if rewritten && !r.Time.After(t.last) {
			continue // read before the rollback
		}
		out = append(out, r)
		if r.Time.After(t.last) {
			t.last = r.Time
		}
	}
	t.seen = len(all)
	return out, rewritten, nil
}

// readAll reads every record of trial id.
func (e *experiment) readAll(id string) ([]storage.Record, error) {
	if !e.trials.remote() {
		return readProgress(e.progressPath(id))
	}
	recs, _, err := e.trials.results(e.ctx, id, storage.Policy{})
	return recs, err
}
