package tune

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Setting an experiment up: a fresh state, or one restored from
// experiment_state.json with its scheduler rebuilt by replaying the
// recorded results.

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
	st, ok, err := LoadState(e.ctx, e.where, e.cfg.storageOpts()...)
	if err != nil {
		return err
	}
	if !ok && mustExist {
		return fmt.Errorf("%w in %s", ErrNoExperiment, e.where)
	}
	e.space = space
	if e.search, err = e.buildSearcher(space); err != nil {
		return err
	}
	if !ok {
		if err := e.refuseEarlierTrials(); err != nil {
			return err
		}
		st = &ExperimentState{Version: 1, Name: e.cfg.Name}
		for eagerSearcher(e.search) {
			id := fmt.Sprintf("trial_%04d", len(st.Trials))
			v, more := e.search.Suggest(id)
			if !more {
				break
			}
			st.Trials = append(st.Trials, &TrialState{ID: id, Config: v.Config, Params: v.Params, Status: StatusPending})
		}
		e.state = st
		e.log.Info("new experiment", "trials", len(st.Trials))
		// Every trial's run directory is made now, rather than one per
		// trial start. They are flushed with the experiment directory by
		// the first state write (writeAtomic flushes the directory after
		// its rename), in the background: until that write is on disk there
		// is no state to resume from, and a fresh start makes them again.
		for _, ts := range st.Trials {
			if err := e.makeTrialDir(ts.ID); err != nil {
				return err
			}
		}
	} else {
		e.state = st
		e.log.Info("restoring experiment", "trials", len(st.Trials))
		e.resume()
	}
	// The state names where its trials are, with the store's options, so
	// that a reader (the dashboard) finds them from the state alone.
	e.state.Metric, e.state.Mode = e.cfg.Metric, e.cfg.Mode
	e.state.TrialStorage, e.state.TrialStorageOptions = "", nil
	if e.trials.remote() {
		o := e.cfg.StorageOptions
		e.state.TrialStorage, e.state.TrialStorageOptions = e.where, &o
	}
	for _, ts := range e.state.Trials {
		e.rt[ts.ID] = &trialRuntime{last: Result{Trial: ts.ID, Value: math.NaN()}}
		e.sched.OnTrialAdd(ts.ID, ts.Config)
		if ok {
			e.search.Adopt(ts.ID, ts.Params)
		}
	}
	if ok {
		if err := e.replay(); err != nil {
			return err
		}
	}
	return e.save()
}

// refuseEarlierTrials fails a fresh experiment whose location holds runs
// with records: an earlier experiment's trials, whose state is gone (or
// is kept elsewhere). Nothing is deleted; the user decides.
func (e *experiment) refuseEarlierTrials() error {
	runs, err := storage.ListRuns(e.ctx, e.trials.root, e.trials.opts...)
	if err != nil {
		return fmt.Errorf("tune: looking for earlier trials: %w", err)
	}
	if len(runs) == 0 {
		return nil
	}
	shown := runs
	if len(shown) > 5 {
		shown = append(slices.Clone(shown[:5]), "...")
	}
	return fmt.Errorf("%w: %s holds no %s but the runs of %d %s (%s); a fresh experiment would resume "+
		"them under its own configs and delete their checkpoints. Resuming needs the state; to start "+
		"over, move %s aside (tune -fresh does, for a directory) or give the experiment another name (nothing is deleted for you)",
		ErrEarlierTrials, e.where, storage.ExperimentStateFile, len(runs),
		english.Plural(len(runs), "trial", "trials"), strings.Join(shown, ", "), e.where)
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
			if spent || e.cfg.KeepErrored {
				continue
			}
			ts.Status, ts.FailuresForgiven = StatusPending, ts.Failures
			retried++
		}
	}
	if retried > 0 {
		e.log.Info("retrying trials that failed before", "trials", retried)
		e.note("retrying %d %s that failed before", retried, english.Plural(retried, "trial", "trials"))
	}
}

// replay feeds every trial's recorded results to the fresh scheduler in the
// order they were written, so that it decides from the same history as
// before the restart. Decisions for finished trials are ignored; an
// unfinished trial the scheduler stops is marked stopped, or terminated
// when it reached its end (max_t, a stop criterion).
func (e *experiment) replay() error {
	type item struct {
		ts  *TrialState
		rec storage.Record
	}
	var all []item
	for _, ts := range e.state.Trials {
		tail := &e.rt[ts.ID].tail
		recs, _, err := e.readTail(tail, ts.ID)
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
			ts.TimeTotal, _ = attr(rec, TimeTotal)
			all = append(all, item{ts, rec})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].rec.Time.Before(all[j].rec.Time) })
	// The history is whole: a warning only if none of it holds the metric.
	for _, it := range all {
		_, held := it.rec.Metrics[e.cfg.Metric]
		e.metricSeen = e.metricSeen || held
		for _, a := range e.watched {
			if _, held := it.rec.Metrics[a.name]; held {
				e.attrSeen[a.name] = true
			}
		}
	}
	if len(all) > 0 {
		e.checkMetric(all[0].ts.ID, all[0].rec.Metrics)
	}
	done := map[string]bool{}
	for _, it := range all {
		if done[it.ts.ID] {
			continue
		}
		r := e.result(it.ts.ID, it.rec)
		d := e.decide(r, it.rec)
		e.rt[it.ts.ID].last = r
		e.search.OnResult(it.ts.ID, r)
		if d.Action == Stop {
			done[it.ts.ID] = true
			if !finished(it.ts.Status) && d.Finished {
				it.ts.Status, it.ts.Reason = StatusTerminated, d.Reason
			} else if !finished(it.ts.Status) {
				it.ts.Status, it.ts.Reason = StatusStopped, d.Reason
			}
		}
	}
	for _, ts := range e.state.Trials {
		if finished(ts.Status) {
			e.sched.OnTrialComplete(ts.ID)
			last := e.rt[ts.ID].last
			e.search.OnTrialComplete(ts.ID, Outcome{Last: last, Pruned: ts.Status == StatusStopped, Failed: ts.Status == StatusError})
		}
	}
	return nil
}

// searcher checks space and builds the configured searcher of it for o
// (Searcher's variant generator when no Search is set).
func (c *Config) searcher(space map[string]any, o Objective) (Searcher, error) {
	settings := c.Search
	if settings == nil {
		settings = VariantSettings{kind: c.Searcher}
	}
	if err := CheckSpace(space); err != nil {
		return nil, fmt.Errorf("tune: %w", err)
	}
	s, err := settings.Build(space, o, c.NumSamples, c.Seed)
	if err != nil {
		return nil, fmt.Errorf("tune: searcher: %w", err)
	}
	return s, nil
}

// buildSearcher builds the configured searcher of space (Searcher's
// variant generator when no Search is set).
func (e *experiment) buildSearcher(space map[string]any) (Searcher, error) {
	s, err := e.cfg.searcher(space, e.obj)
	if err != nil {
		return nil, err
	}
	if len(sites(space, nil, nil)) == 0 && space != nil {
		e.log.Warn("the search space has no search-space functions: every trial runs the same config")
		e.note("warning: the search space has no search-space functions (uniform, choice, grid_search, ...): every trial runs the same config")
	}
	return s, nil
}

// suggest asks the searcher for a new trial when a slot is free and it
// has trials left to make; made says one was added, pending.
func (e *experiment) suggest() (made bool, err error) {
	if e.space == nil || e.busy() >= e.cfg.MaxConcurrentTrials || len(e.state.Trials) >= e.search.Total() {
		return false, nil
	}
	id := fmt.Sprintf("trial_%04d", len(e.state.Trials))
	v, ok := e.search.Suggest(id)
	if !ok {
		return false, nil
	}
	if err := e.makeTrialDir(id); err != nil {
		return false, err
	}
	ts := &TrialState{ID: id, Config: v.Config, Params: v.Params, Status: StatusPending}
	e.state.Trials = append(e.state.Trials, ts)
	e.rt[id] = &trialRuntime{last: Result{Trial: id, Value: math.NaN()}}
	e.sched.OnTrialAdd(id, v.Config)
	e.log.Debug("searcher suggested a trial", "trial", id, "params", v.Params)
	e.changed()
	return true, nil
}
