package tune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
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

// Restore returns a tuner that resumes the experiment at where, a
// directory or an s3:// location (Ray's Tuner.restore): its trials,
// configs and statuses come from the state, so no param space is needed.
// cfg supplies the scheduler, metric and other settings; its Name and
// StoragePath are taken from where.
func Restore(where string, backend Backend, cfg Config) *Tuner {
	if root, name, ok := storage.SplitRunPath(where); ok {
		cfg.Name, cfg.StoragePath = name, root
	} else {
		cfg.Name, cfg.StoragePath = filepath.Base(where), filepath.Dir(where)
	}
	return &Tuner{backend: backend, cfg: cfg, restore: true}
}

// New returns a tuner that samples space (a config with Domains anywhere
// inside it) and runs each trial on backend.
func New(backend Backend, space map[string]any, cfg Config) *Tuner {
	return &Tuner{backend: backend, space: space, cfg: cfg}
}

// ErrLocked is returned when another tuner runs the same experiment.
var ErrLocked = errors.New("experiment is being run by another tuner")

// errLeftToAnother is the cause a trial's context is cancelled with when
// another tuner has taken the experiment over: a backend leaves the
// trial's job running (the other tuner adopts it) rather than stop it.
var errLeftToAnother = errors.New("the experiment was taken over by another tuner")

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
	e := &experiment{cfg: cfg, backend: t.backend, where: storage.RunLocation(cfg.StoragePath, cfg.Name),
		log: cfg.Logger.Named("tune").With("experiment", cfg.Name), rt: map[string]*trialRuntime{},
		events: make(chan event)}
	e.trials = newTrialStore(e.where, cfg.StorageOptions)
	// The trials' records and the experiment's state outlive an
	// interrupted Fit: the last state is written and the grid read after
	// ctx ends.
	e.ctx = context.WithoutCancel(ctx)
	if t.restore {
		if _, ok, err := LoadState(e.ctx, e.where, cfg.storageOpts()...); err != nil {
			return nil, err
		} else if !ok {
			return nil, fmt.Errorf("%w in %s", ErrNoExperiment, e.where)
		}
	}
	lockOpts := append(cfg.storageOpts(), storage.WithLogger(cfg.Logger))
	if cfg.Instance != "" {
		lockOpts = append(lockOpts, storage.WithWriter(cfg.Instance, uint64(time.Now().UnixNano())))
	}
	store, err := storage.OpenExperiment(e.ctx, e.where, lockOpts...)
	if errors.Is(err, storage.ErrLocked) {
		return nil, fmt.Errorf("%w: %w", ErrLocked, err)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := store.Close(); err != nil {
			e.log.Warn("could not release the experiment's lock", "error", err)
		}
	}()
	e.store, e.writer = store, newStateWriter(store.WriteState)
	if err := e.setup(t.space, t.restore); err != nil {
		e.writer.close()
		return nil, err
	}
	runErr := e.loop(ctx)
	if err := e.writer.close(); err != nil && runErr == nil {
		runErr = err
	}
	grid, err := loadResultGrid(e.ctx, e.where, e.trials, cfg.Metric, cfg.Mode)
	if err != nil {
		return nil, errors.Join(runErr, err)
	}
	if err := grid.metricReported(); err != nil {
		runErr = errors.Join(runErr, err)
	} else if e.metricMissing != nil {
		runErr = errors.Join(runErr, e.metricMissing)
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
	where   string          // the experiment's place: a directory, or s3://...
	trials  trialStore      // where the trials' runs are kept
	ctx     context.Context // bounds reads of the trials' runs (not cancelled with Fit's)
	log     hclog.Logger
	state   *ExperimentState
	sched   Scheduler
	search  Searcher
	space   map[string]any // nil when restored without one: no new trials
	obj     Objective
	writer  *stateWriter
	store   *storage.Experiment // the experiment's lock
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
	// metricMissing is set when every running trial has reported without
	// the metric: the experiment stops, naming the metrics reported.
	metricMissing *MetricError
}

type trialRuntime struct {
	cancel     context.CancelFunc
	abandon    func()       // cancel, leaving the trial's job to another tuner
	tail       progressTail // how far progress.jsonl has been read
	stopReason string       // set when the scheduler or the budget stopped it
	exploit    *Decision    // set when PBT exploits into it
	stopping   bool         // a stop was asked: its results no longer count
	finished   bool         // the scheduler stopped it at its end (max_t): TERMINATED
	last       Result       // the latest result the scheduler saw (for the searcher)
	reported   bool         // it has reported since the tuner started
	waiting    bool         // its backend waits for capacity: shown PENDING
	reason     string       // its reason before it waited
}

// event is a trial's message to the loop: it exited, or (in-process
// trials) it reported and waits for ack.
type event struct {
	trial string
	exit  bool
	err   error
	ack   chan struct{}
	wait  *string // Waiting's why: "" once placed
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

func (e *experiment) progressPath(id string) string {
	return filepath.Join(e.where, id, storage.ProgressFile)
}

// makeTrialDir makes a trial's run directory when the trials are kept in
// a directory (on an object store a run needs none).
func (e *experiment) makeTrialDir(id string) error {
	if e.trials.remote() {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(e.where, id), 0o755); err != nil {
		return fmt.Errorf("make trial directory: %w", err)
	}
	return nil
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

// lostExperiment returns why this tuner no longer holds the experiment
// (another tuner took it over), or nil: it holds it, or the storage could
// not say (then the trials are stopped as usual).
func (e *experiment) lostExperiment() error {
	if err := e.store.Held(); errors.Is(err, storage.ErrLocked) {
		return err
	}
	return nil
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
		// Whatever ended the loop, stop and wait for every trial; unless
		// another tuner has taken the experiment over, which adopts them.
		var takenOver error
		if e.running > 0 {
			if takenOver = e.lostExperiment(); takenOver != nil {
				e.log.Warn("another tuner holds the experiment now: leaving the trials running for it", "error", takenOver)
				e.note("another tuner holds the experiment now; its trials are left running for it")
				for _, rt := range e.rt {
					if rt.cancel != nil {
						rt.stopping = true
						rt.abandon()
					}
				}
			} else {
				e.stopEverything("tuner stopped")
			}
			for e.running > 0 {
				if herr := e.handle(<-e.events); herr != nil && err == nil {
					err = herr
				}
			}
		}
		if takenOver != nil { // the state is the other tuner's to write
			err = fmt.Errorf("%w: %w", ErrLocked, takenOver)
			return
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
			if ts.Status == StatusPending && e.rt[ts.ID].cancel == nil { // not one waiting for capacity
				pending = append(pending, ts)
				if len(pending) == e.cfg.MaxConcurrentTrials {
					break
				}
			}
		}
		if len(pending) == 0 {
			if made, err := e.suggest(); err != nil || !made {
				return err
			}
			continue
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
	// A trial ends when the loop says so (stopEverything, also when ctx
	// ends), not with ctx itself: an interrupted tuner that another has
	// taken the experiment from leaves its trials running.
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	rt := e.rt[ts.ID]
	rt.abandon = func() { cancel(errLeftToAnother) }
	rt.cancel, rt.stopReason, rt.exploit, rt.stopping, rt.finished = func() { cancel(nil) }, "", nil, false, false
	ts.Status = StatusRunning
	e.running++
	if !e.trials.remote() {
		e.watch.add(filepath.Join(e.where, ts.ID))
	}
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
	return TrialSpec{ID: id, StoragePath: e.trials.root, Storage: e.cfg.workerStorage(), Config: cfgJSON, Checkpoint: e.cfg.Checkpoint,
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
		},
		Waiting: func(c context.Context, why string) {
			select {
			case e.events <- event{trial: id, wait: &why}:
			case <-c.Done():
			}
		}}, nil
}

// handle processes one event.
func (e *experiment) handle(ev event) error {
	if ev.wait != nil {
		e.waiting(ev.trial, *ev.wait)
		return nil
	}
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
	if !e.trials.remote() {
		e.watch.remove(filepath.Join(e.where, ts.ID))
	}
	if rt.waiting {
		rt.waiting, ts.Reason = false, rt.reason
	}
	switch {
	case ev.err == nil, rt.finished:
		// The training function finished, even if a stop was on its way,
		// or the scheduler stopped it at its end (max_t).
		ts.Status, ts.Reason = StatusTerminated, ""
		if rt.finished {
			ts.Reason = rt.stopReason
		}
		e.sched.OnTrialComplete(ts.ID)
		e.search.OnTrialComplete(ts.ID, Outcome{Last: rt.last})
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
		e.search.OnTrialComplete(ts.ID, Outcome{Last: rt.last, Pruned: true})
	case e.stopAll != "" || e.interrupted() != nil:
		ts.Status = StatusPending // unfinished: resumes on the next Fit
	default:
		ts.Failures++
		ts.Reason = ev.err.Error()
		retry := e.cfg.MaxFailures < 0 || ts.Failures-ts.FailuresForgiven <= e.cfg.MaxFailures
		if retry && !errors.Is(ev.err, ErrUnrunnable) {
			e.log.Warn("trial failed, restarting from its checkpoint", "trial", ts.ID, "failures", ts.Failures, "error", ev.err)
			ts.Status = StatusPending
		} else {
			ts.Status = StatusError
			e.sched.OnTrialComplete(ts.ID)
			e.search.OnTrialComplete(ts.ID, Outcome{Last: rt.last, Failed: true})
		}
	}
	e.changed()
	return nil
}

// waiting shows a trial whose backend waits for capacity as PENDING, with
// why, and as RUNNING again once it is placed (why empty). A trial that
// has ended or is being stopped stays as it is.
func (e *experiment) waiting(id, why string) {
	ts, rt := e.trial(id), e.rt[id]
	if rt.cancel == nil || rt.stopping {
		return
	}
	switch {
	case why != "":
		if !rt.waiting {
			rt.waiting, rt.reason = true, ts.Reason
		}
		ts.Status, ts.Reason = StatusPending, why
	case rt.waiting:
		rt.waiting = false
		ts.Status, ts.Reason = StatusRunning, rt.reason
	default:
		return
	}
	e.log.Debug("trial placement", "trial", id, "status", ts.Status, "waiting_for", why)
	e.changed()
}

func (e *experiment) trial(id string) *TrialState {
	for _, ts := range e.state.Trials {
		if ts.ID == id {
			return ts
		}
	}
	panic("tune: unknown trial " + id)
}
