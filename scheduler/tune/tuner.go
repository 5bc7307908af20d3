package tune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// ClonedFrom is the metric key of the record PBT writes when it copies a
// donor's checkpoint into a trial: it names the donor. Such records are not
// the trial's own reports and are not fed to the scheduler.
const ClonedFrom = "tune_cloned_from"

// Tuner runs an experiment: trials sampled from a param space, placed by a
// backend, followed through their progress files and stopped, cloned or
// restarted as the scheduler decides (Ray's Tuner).
type Tuner struct {
	backend Backend
	space   map[string]any
	cfg     Config
	restore bool // the experiment must exist
}

// ErrNoExperiment is returned by a restored Tuner's Fit when the directory
// holds no experiment state.
var ErrNoExperiment = errors.New("no experiment state to restore")

// Restore returns a tuner that resumes the experiment in expDir (Ray's
// Tuner.restore): its trials, configs and statuses come from the state
// file, so no param space is needed. cfg supplies the scheduler, metric and
// other settings; its Name and StoragePath are taken from expDir.
func Restore(expDir string, backend Backend, cfg Config) *Tuner {
	cfg.Name, cfg.StoragePath = filepath.Base(expDir), filepath.Dir(expDir)
	return &Tuner{backend: backend, cfg: cfg, restore: true}
}

// New returns a tuner that samples space (a config with Domains anywhere
// inside it) and runs each trial on backend.
func New(backend Backend, space map[string]any, cfg Config) *Tuner {
	return &Tuner{backend: backend, space: space, cfg: cfg}
}

// ErrLocked is returned when another tuner runs the same experiment.
var ErrLocked = errors.New("experiment is being run by another tuner")

// Fit runs the experiment until every trial has finished, the time budget
// is spent or ctx ends, and returns the result grid. When the experiment
// directory already holds a state (an earlier Fit crashed, was stopped or
// ended with failed trials), Fit resumes it (Ray's Tuner.restore with
// resume_errored): trials that finished (TERMINATED, STOPPED) are kept as
// they are, and unfinished ones and those that failed (ERROR) restart from
// their latest checkpoints, the failed ones with their whole failure
// budget. When trials reported results and none of them holds the
// metric, Fit returns the grid with a *MetricError.
//
// With the Processes backend, a copy of this program started as a worker
// runs the training function in Fit and exits.
func (t *Tuner) Fit(ctx context.Context) (*ResultGrid, error) {
	if w, ok := t.backend.(interface{ workerFunc() trainer.TrainFunc }); ok && w.workerFunc() != nil && workerenv.IsWorker() {
		os.Exit(RunWorker(ctx, w.workerFunc()))
	}
	cfg := t.cfg
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &experiment{cfg: cfg, backend: t.backend, dir: filepath.Join(cfg.StoragePath, cfg.Name),
		log: cfg.Logger.Named("tune").With("experiment", cfg.Name), rt: map[string]*trialRuntime{},
		events: make(chan event)}
	if t.restore {
		if _, ok, err := LoadState(e.dir); err != nil {
			return nil, err
		} else if !ok {
			return nil, fmt.Errorf("%w in %s", ErrNoExperiment, e.dir)
		}
	}
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return nil, fmt.Errorf("make experiment directory: %w", err)
	}
	unlock, err := lockDir(e.dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	e.writer = newStateWriter(filepath.Join(e.dir, StateFile))
	if err := e.setup(t.space, t.restore); err != nil {
		e.writer.close()
		return nil, err
	}
	runErr := e.loop(ctx)
	if err := e.writer.close(); err != nil && runErr == nil {
		runErr = err
	}
	grid, err := LoadResultGrid(e.dir, cfg.Metric, cfg.Mode)
	if err != nil {
		return nil, errors.Join(runErr, err)
	}
	if err := grid.metricReported(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if e.cfg.Progress != nil {
		WriteTable(e.cfg.Progress, e.state, e.cfg.Metric)
	}
	return grid, runErr
}

// experiment is one Fit call's working state. Only the loop goroutine
// touches it; trial goroutines talk to the loop through events.
type experiment struct {
	cfg     Config
	backend Backend
	dir     string
	log     hclog.Logger
	state   *ExperimentState
	sched   Scheduler
	obj     Objective
	writer  *stateWriter
	rt      map[string]*trialRuntime
	events  chan event
	running int
	started time.Time
	// watch wakes the loop when a process trial's progress file changes
	// (nil: polling only).
	watch *dirWatcher
	// dirty is set when the state changed since it was last handed to the
	// writer; the loop saves once per round, after starting trials, so
	// that encoding the state is not on a trial hand-over's path.
	dirty bool
	// stopAll is set when the experiment is ending (ctx done, budget spent):
	// no trial starts any more.
	stopAll string
	// interrupted is the Fit context's Err: a trial that ends once it is
	// set was stopped by the interruption, whether or not the loop has
	// seen it yet.
	interrupted func() error
	// metricSeen is set once a report holds the metric; metricWarned once
	// the user was told that one did not, before any did.
	metricSeen, metricWarned bool
}

type trialRuntime struct {
	cancel     context.CancelFunc
	tail       progressTail // how far progress.jsonl has been read
	stopReason string       // set when the scheduler or the budget stopped it
	exploit    *Decision    // set when PBT exploits into it
	stopping   bool         // a stop was asked: its results no longer count
}

// event is a trial's message to the loop: it exited, or (in-process
// trials) it reported and waits for ack.
type event struct {
	trial string
	exit  bool
	err   error
	ack   chan struct{}
}

// setup creates or restores the state and rebuilds the scheduler.
func (e *experiment) setup(space map[string]any, mustExist bool) error {
	e.obj = Objective{Metric: e.cfg.Metric, Mode: e.cfg.Mode, TimeAttr: e.cfg.TimeAttr}
	settings := e.cfg.Scheduler
	if settings == nil {
		settings = FIFO{}
	}
	sched, err := settings.Build(e.obj, e.cfg.Seed)
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	e.sched = sched
	st, ok, err := LoadState(e.dir)
	if err != nil {
		return err
	}
	if !ok && mustExist {
		return fmt.Errorf("%w in %s", ErrNoExperiment, e.dir)
	}
	if !ok {
		gen, err := NewGenerator(space, e.cfg.Searcher, e.cfg.NumSamples, e.cfg.Seed)
		if err != nil {
			return err
		}
		st = &ExperimentState{Version: 1, Name: e.cfg.Name}
		for v, ok := gen.Next(); ok; v, ok = gen.Next() {
			st.Trials = append(st.Trials, &TrialState{ID: fmt.Sprintf("trial_%04d", v.Index),
				Config: v.Config, Params: v.Params, Status: StatusPending})
		}
		e.state = st
		e.log.Info("new experiment", "trials", len(st.Trials))
		// Every trial's run directory is made now, rather than one per
		// trial start. They are flushed with the experiment directory by
		// the first state write (writeAtomic flushes the directory after
		// its rename), in the background: until that write is on disk there
		// is no state to resume from, and a fresh start makes them again.
		for _, ts := range st.Trials {
			if err := os.MkdirAll(filepath.Join(e.dir, ts.ID), 0o755); err != nil {
				return fmt.Errorf("make trial directory: %w", err)
			}
		}
	} else {
		e.state = st
		e.log.Info("restoring experiment", "trials", len(st.Trials))
		e.resume()
	}
	for _, ts := range e.state.Trials {
		e.rt[ts.ID] = &trialRuntime{}
		e.sched.OnTrialAdd(ts.ID, ts.Config)
	}
	if ok {
		if err := e.replay(); err != nil {
			return err
		}
	}
	return e.save()
}

// resume makes the restored trials that are to run again pending: those
// that were running when the last Fit ended, and those it left in ERROR
// (a failure for good may have been an outage that is over: Ray's
// resume_errored), which start with a fresh failure budget. The trials
// that finished stay as they are.
func (e *experiment) resume() {
	// With the time budget spent no trial runs again, and a failed one
	// stays failed rather than pending for ever.
	spent := e.cfg.TimeBudget > 0 && e.state.Elapsed >= e.cfg.TimeBudget
	retried := 0
	for _, ts := range e.state.Trials {
		switch ts.Status {
		case StatusRunning:
			ts.Status = StatusPending
		case StatusError:
			if spent {
				continue
			}
			ts.Status, ts.FailuresForgiven = StatusPending, ts.Failures
			retried++
		}
	}
	if retried > 0 {
		e.log.Info("retrying trials that failed before", "trials", retried)
		e.note("retrying %d %s that failed before", retried, plural(retried, "trial", "trials"))
	}
}

// note tells the user something about the experiment, on the Progress
// writer, where the trial table goes.
func (e *experiment) note(format string, args ...any) {
	if e.cfg.Progress != nil {
		fmt.Fprintf(e.cfg.Progress, "== %s: %s\n", e.cfg.Name, fmt.Sprintf(format, args...))
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// replay feeds every trial's recorded results to the fresh scheduler in the
// order they were written, so that it decides from the same history as
// before the restart. Decisions for finished trials are ignored; an
// unfinished trial the scheduler stops is marked stopped.
func (e *experiment) replay() error {
	type item struct {
		ts  *TrialState
		rec storage.Record
	}
	var all []item
	for _, ts := range e.state.Trials {
		tail := &e.rt[ts.ID].tail
		recs, _, err := tail.read(e.progressPath(ts.ID))
		tail.close()
		if err != nil {
			return err
		}
		ts.Iterations = 0
		for _, rec := range recs {
			if _, cloned := rec.Metrics[ClonedFrom]; cloned {
				continue
			}
			ts.Iterations++
			ts.LastResult = rec.Metrics
			all = append(all, item{ts, rec})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].rec.Time.Before(all[j].rec.Time) })
	// The history is whole: a warning only if none of it holds the metric.
	for _, it := range all {
		_, held := it.rec.Metrics[e.cfg.Metric]
		e.metricSeen = e.metricSeen || held
	}
	if len(all) > 0 {
		e.checkMetric(all[0].ts.ID, all[0].rec.Metrics)
	}
	done := map[string]bool{}
	for _, it := range all {
		if done[it.ts.ID] {
			continue
		}
		d := e.sched.OnResult(e.result(it.ts.ID, it.rec))
		if d.Action == Stop {
			done[it.ts.ID] = true
			if !finished(it.ts.Status) {
				it.ts.Status, it.ts.Reason = StatusStopped, d.Reason
			}
		}
	}
	for _, ts := range e.state.Trials {
		if finished(ts.Status) {
			e.sched.OnTrialComplete(ts.ID)
		}
	}
	return nil
}

func (e *experiment) progressPath(id string) string {
	return filepath.Join(e.dir, id, storage.ProgressFile)
}

// result turns a record into the scheduler's view.
func (e *experiment) result(id string, rec storage.Record) Result {
	r := Result{Trial: id, Value: math.NaN(), Checkpoint: rec.Checkpoint != ""}
	if e.obj.TimeAttr == TrainingIteration {
		r.Time = float64(rec.Step)
	} else if v, ok := storage.Score(rec, e.obj.TimeAttr); ok {
		r.Time = v
	}
	if v, ok := storage.Score(rec, e.obj.Metric); ok {
		r.Value = v
	}
	return r
}

// changed marks the state as to be saved before the loop next waits.
func (e *experiment) changed() { e.dirty = true }

// save hands a snapshot of the state to the writer (which writes it in
// the background) and returns the writer's first error so far.
func (e *experiment) save() error {
	e.dirty = false
	if !e.started.IsZero() {
		now := time.Now()
		e.state.Elapsed += now.Sub(e.started)
		e.started = now
	}
	b, err := e.state.encode()
	if err != nil {
		return err
	}
	return e.writer.submit(b)
}

// loop runs trials until none is left to run. On return no trial
// goroutine is left.
func (e *experiment) loop(ctx context.Context) (err error) {
	e.interrupted = ctx.Err
	e.started = time.Now()
	if r, ok := e.backend.(InProcessReports); !ok || !r.InProcessReports() {
		e.watch = newDirWatcher()
		defer e.watch.close()
	}
	tick := time.NewTicker(e.cfg.PollInterval)
	defer tick.Stop()
	show := time.NewTicker(e.cfg.ProgressInterval)
	defer show.Stop()
	var budget <-chan time.Time
	if e.cfg.TimeBudget > 0 {
		left := e.cfg.TimeBudget - e.state.Elapsed
		if left <= 0 {
			e.stopAll = "time budget spent"
		}
		tm := time.NewTimer(max(left, 0))
		defer tm.Stop()
		budget = tm.C
	}
	defer func() {
		if p, ok := e.backend.(Preparer); ok {
			defer p.Release()
		}
		// Whatever ended the loop, stop and wait for every trial.
		if e.running > 0 {
			e.stopEverything("tuner stopped")
			for e.running > 0 {
				if herr := e.handle(<-e.events); herr != nil && err == nil {
					err = herr
				}
			}
		}
		if serr := e.save(); serr != nil && err == nil {
			err = serr
		}
	}()
	for {
		if err := e.fill(ctx); err != nil {
			return err
		}
		if e.running == 0 {
			return ctx.Err() // nil unless interrupted before the last trial ended
		}
		if e.dirty {
			if err := e.save(); err != nil {
				return err
			}
		}
		select {
		case ev := <-e.events:
			if err := e.handle(ev); err != nil {
				return err
			}
		case <-tick.C:
			e.pollRunning()
		case <-e.watch.changed():
			e.pollRunning()
		case <-show.C:
			if e.cfg.Progress != nil {
				WriteTable(e.cfg.Progress, e.state, e.cfg.Metric)
			}
		case <-budget:
			e.log.Info("time budget spent, stopping trials")
			e.stopEverything("time budget spent")
		case <-ctx.Done():
			e.stopAll = "interrupted"
			return ctx.Err()
		}
	}
}

// pollRunning reads the new reports of every running trial.
func (e *experiment) pollRunning() {
	for id, rt := range e.rt {
		if rt.cancel != nil {
			e.poll(id)
		}
	}
}

// stopEverything stops every running trial and starts no more. Trials
// stopped for the budget end as STOPPED; on interruption they stay
// unfinished, to resume.
func (e *experiment) stopEverything(reason string) {
	e.stopAll = reason
	for _, ts := range e.state.Trials {
		rt := e.rt[ts.ID]
		if rt.cancel == nil {
			continue
		}
		if reason != "interrupted" && reason != "tuner stopped" && !rt.stopping {
			rt.stopReason = reason
		}
		rt.stopping = true
		rt.cancel()
	}
}

// fill starts pending trials while there are free slots. When every slot
// is busy, it lets a Preparer get the next trials ready, as many as there
// are slots (several may free up at once: trials a rung stops are short).
func (e *experiment) fill(ctx context.Context) error {
	for e.stopAll == "" && ctx.Err() == nil {
		var pending []*TrialState
		for _, ts := range e.state.Trials {
			if ts.Status == StatusPending {
				pending = append(pending, ts)
				if len(pending) == e.cfg.MaxConcurrentTrials {
					break
				}
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if e.busy() >= e.cfg.MaxConcurrentTrials {
			if p, ok := e.backend.(Preparer); ok {
				for _, ts := range pending {
					if spec, err := e.spec(ts); err == nil {
						p.Prepare(spec) // get them ready while the slots are busy
					}
				}
			}
			return nil
		}
		if err := e.start(ctx, pending[0]); err != nil {
			return err
		}
	}
	return nil
}

// busy is how many slots are taken: the running trials, less those told
// to stop when the backend frees a slot on stop (SlotFreedOnStop).
func (e *experiment) busy() int {
	if f, ok := e.backend.(SlotFreedOnStop); !ok || !f.SlotFreedOnStop() {
		return e.running
	}
	n := 0
	for _, rt := range e.rt {
		if rt.cancel != nil && !rt.stopping {
			n++
		}
	}
	return n
}

func (e *experiment) start(ctx context.Context, ts *TrialState) error {
	spec, err := e.spec(ts)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	rt := e.rt[ts.ID]
	rt.cancel, rt.stopReason, rt.exploit, rt.stopping = cancel, "", nil, false
	ts.Status = StatusRunning
	e.running++
	e.watch.add(filepath.Join(e.dir, ts.ID))
	e.log.Debug("starting trial", "trial", ts.ID, "config", string(spec.Config))
	go func() {
		err := e.backend.Run(rctx, spec)
		e.events <- event{trial: spec.ID, exit: true, err: err} // the loop drains until no trial runs
	}()
	e.changed()
	return nil
}

// spec is the trial's placement request.
func (e *experiment) spec(ts *TrialState) (TrialSpec, error) {
	cfgJSON, err := json.Marshal(ts.Config)
	if err != nil {
		return TrialSpec{}, fmt.Errorf("encode config of %s: %w", ts.ID, err)
	}
	id := ts.ID
	return TrialSpec{ID: id, StoragePath: e.dir, Config: cfgJSON, Checkpoint: e.cfg.Checkpoint,
		Reported: func(c context.Context) error {
			ack := make(chan struct{})
			select {
			case e.events <- event{trial: id, ack: ack}:
			case <-c.Done():
				return c.Err()
			}
			select {
			case <-ack:
			case <-c.Done():
			}
			return c.Err()
		}}, nil
}

// handle processes one event.
func (e *experiment) handle(ev event) error {
	e.poll(ev.trial)
	if ev.ack != nil {
		close(ev.ack)
		return nil
	}
	ts := e.trial(ev.trial)
	rt := e.rt[ev.trial]
	rt.tail.close()
	rt.cancel()
	rt.cancel = nil
	e.running--
	e.watch.remove(filepath.Join(e.dir, ts.ID))
	switch {
	case ev.err == nil:
		// The training function finished, even if a stop was on its way.
		ts.Status, ts.Reason = StatusTerminated, ""
		e.sched.OnTrialComplete(ts.ID)
	case rt.exploit != nil:
		if err := e.cloneInto(ts, rt.exploit); err != nil {
			e.log.Warn("exploit failed, trial continues from its own checkpoint", "trial", ts.ID, "error", err)
		} else {
			ts.Config = rt.exploit.Config
		}
		ts.Status = StatusPending
	case rt.stopReason != "":
		ts.Status, ts.Reason = StatusStopped, rt.stopReason
		e.sched.OnTrialComplete(ts.ID)
	case e.stopAll != "" || e.interrupted() != nil:
		ts.Status = StatusPending // unfinished: resumes on the next Fit
	default:
		ts.Failures++
		ts.Reason = ev.err.Error()
		if e.cfg.MaxFailures < 0 || ts.Failures-ts.FailuresForgiven <= e.cfg.MaxFailures {
			e.log.Warn("trial failed, restarting from its checkpoint", "trial", ts.ID, "failures", ts.Failures, "error", ev.err)
			ts.Status = StatusPending
		} else {
			ts.Status = StatusError
			e.sched.OnTrialComplete(ts.ID)
		}
	}
	e.changed()
	return nil
}

func (e *experiment) trial(id string) *TrialState {
	for _, ts := range e.state.Trials {
		if ts.ID == id {
			return ts
		}
	}
	panic("tune: unknown trial " + id)
}

// poll reads the trial's new records and lets the scheduler decide on each.
func (e *experiment) poll(id string) {
	rt := e.rt[id]
	recs, rewritten, err := rt.tail.read(e.progressPath(id))
	if err != nil {
		e.log.Warn("cannot read trial progress", "trial", id, "error", err)
		return
	}
	ts := e.trial(id)
	if rewritten { // rolled back: count the history as it now is
		all, err := readProgress(e.progressPath(id))
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
		d := e.sched.OnResult(e.result(id, rec))
		switch d.Action {
		case Stop:
			e.log.Debug("stopping trial", "trial", id, "reason", d.Reason)
			rt.stopping, rt.stopReason = true, d.Reason
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

// cloneInto copies the donor's latest checkpoint into the trial's storage
// as a committed checkpoint (PBT exploit); the trial, stopped, restarts
// from it. The commit record carries the donor's step and metrics, so the
// trial's iteration count continues from the donor's.
func (e *experiment) cloneInto(ts *TrialState, d *Decision) error {
	donor, err := storage.OpenReadOnly(e.dir, d.Donor, storage.Policy{})
	if err != nil {
		return fmt.Errorf("open donor storage: %w", err)
	}
	defer donor.Close()
	name, path, ok, err := donor.Latest()
	if err != nil || !ok {
		return fmt.Errorf("find donor checkpoint: %w (found %v)", err, ok)
	}
	recs, err := donor.Records()
	if err != nil {
		return fmt.Errorf("read donor progress: %w", err)
	}
	var src storage.Record
	for _, r := range recs {
		if r.Checkpoint == name {
			src = r
		}
	}
	st, err := storage.Open(e.dir, ts.ID, storage.Policy{NumToKeep: e.cfg.Checkpoint.NumToKeep,
		ScoreAttribute: e.cfg.Checkpoint.ScoreAttribute, ScoreOrder: e.cfg.Checkpoint.ScoreOrder})
	if err != nil {
		return fmt.Errorf("open trial storage: %w", err)
	}
	defer st.Close()
	staged, err := st.Stage()
	if err != nil {
		return err
	}
	if err := copyTree(path, staged.Dir()); err != nil {
		staged.Abort()
		return fmt.Errorf("copy donor checkpoint: %w", err)
	}
	metrics := trainer.Metrics{}
	for k, v := range src.Metrics {
		metrics[k] = v
	}
	metrics[ClonedFrom] = d.Donor
	// The trial restarts from the clone and rolls back what it reported
	// after the clone's step; roll back now, so the clone's record does
	// not go back in steps (readers refuse a history that does).
	if err := st.TruncateAfter(src.Step); err != nil {
		staged.Abort()
		return fmt.Errorf("roll trial back to the cloned step: %w", err)
	}
	if _, err := st.Commit(staged, storage.Record{Step: src.Step, Metrics: metrics}); err != nil {
		return fmt.Errorf("commit cloned checkpoint: %w", err)
	}
	ts.Exploits = append(ts.Exploits, ExploitRecord{Donor: d.Donor, Time: e.result(d.Donor, src).Time})
	return nil
}

// copyTree copies the regular files and directories under src into dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if de.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !de.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// lockDir takes an exclusive lock on the experiment directory.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".tuner.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock experiment: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	return func() { f.Close() }, nil
}
