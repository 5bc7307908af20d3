package tune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nomad-train/nomad-train/trainspec"
)

// The experiment's loop: it starts trials as slots free up, follows them
// through their reports and their backends' exits, and ends them when the
// scheduler, the budget or the tuner's end says so.

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
			e.note("the time budget (%s) was spent by earlier runs: no trial starts", trainspec.FormatDuration(e.cfg.TimeBudget))
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
				e.stopEverything(stopTuner)
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
				writeFrame(e.cfg.Progress, e.state, e.cfg.Metric, e.budgetLeft(), liveRows)
			}
			if e.reportedSinceSave {
				e.changed() // the running trials' iterations and times, for status and the dashboard
			}
		case <-budget:
			e.log.Info("time budget spent, stopping trials")
			e.note("the time budget (%s) is spent: the running trials stop and no more start", trainspec.FormatDuration(e.cfg.TimeBudget))
			e.stopEverything("time budget spent")
		case <-ctx.Done():
			e.stopAll = stopInterrupted
			return ctx.Err()
		}
	}
}

// budgetLeft says how much of the time budget is left, counting the
// earlier Fits, for the live table; "" without a budget.
func (e *experiment) budgetLeft() string {
	if e.cfg.TimeBudget <= 0 {
		return ""
	}
	left := max(e.cfg.TimeBudget-e.state.Elapsed-time.Since(e.started), 0)
	return fmt.Sprintf("%s of the %s budget left", trainspec.FormatDuration(left.Round(time.Second)),
		trainspec.FormatDuration(e.cfg.TimeBudget))
}

// pollRunning reads the new reports of every running trial.
func (e *experiment) pollRunning() {
	for id, rt := range e.rt {
		if rt.cancel != nil {
			e.poll(id)
		}
	}
}

// Reasons for stopping every trial that leave them unfinished, to resume;
// any other (the time budget spent) ends them STOPPED.
const (
	stopInterrupted = "interrupted"
	stopTuner       = "tuner stopped"
	stopFailFast    = "a trial failed and fail_fast is set"
)

// stopEverything stops every running trial and starts no more. Trials
// stopped for the budget end as STOPPED; on interruption, or for
// fail_fast, they stay unfinished, to resume.
func (e *experiment) stopEverything(reason string) {
	e.stopAll = reason
	for _, ts := range e.state.Trials {
		rt := e.rt[ts.ID]
		if rt.cancel == nil {
			continue
		}
		if reason != stopInterrupted && reason != stopTuner && reason != stopFailFast && !rt.stopping {
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
			if e.cfg.FailFast && e.failedFast == nil {
				e.failedFast = &TrialFailedError{Trial: ts.ID, Reason: ts.Reason}
				e.log.Error("a trial failed, stopping the experiment (fail_fast)", "trial", ts.ID, "error", ev.err)
				e.note("stopping: %v", e.failedFast)
				e.stopEverything(stopFailFast)
			}
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
