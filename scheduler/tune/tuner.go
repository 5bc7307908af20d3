package tune

import (
	"context"
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

// ErrEarlierTrials is returned by Fit when an experiment without a state
// finds trial runs of an earlier one at its location: a fresh experiment
// would resume them under its own configs (its trials have the same
// names), and its retention would delete what they trained.
var ErrEarlierTrials = errors.New("earlier trials without an experiment state")

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

// TrialFailedError is Fit's error when a trial failed beyond its failure
// budget and Config.FailFast stopped the experiment.
type TrialFailedError struct {
	Trial, Reason string
}

func (e *TrialFailedError) Error() string {
	return fmt.Sprintf("%s failed and fail_fast is set: %s", e.Trial, e.Reason)
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
		events: make(chan event), watched: watchedAttrs(cfg), attrSeen: map[string]bool{}, attrWarned: map[string]bool{},
		plateaus: map[string]*plateau{}}
	e.trials = newTrialStore(e.where, cfg.StorageOptions)
	e.trials.opts = tunerStorage(e.trials) // the tuner follows its trials through outages too
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
	if e.failedFast != nil {
		runErr = errors.Join(runErr, e.failedFast)
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
	// reportedSinceSave is set when a trial's report changed its row
	// (iterations, time, last result) since the last save: a report alone
	// does not save the state, but the next progress tick does.
	reportedSinceSave bool
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
	// failedFast is set when a trial failed for good and FailFast stopped
	// the experiment.
	failedFast *TrialFailedError
	// watched are the attributes the settings read that trials report
	// (watchedAttrs); attrSeen holds those a report held;
	// attrWarned the settings whose attribute the user was told a report
	// lacked, before any held it.
	watched              []watchedAttr
	attrSeen, attrWarned map[string]bool
	// plateaus follows each trial's metric for Config.Plateau.
	plateaus map[string]*plateau
}

type trialRuntime struct {
	cancel     context.CancelFunc
	abandon    func()       // cancel, leaving the trial's job to another tuner
	tail       progressTail // how far the trial's records have been read
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
	if v, ok := attr(rec, e.obj.TimeAttr); ok {
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
	e.dirty, e.reportedSinceSave = false, false
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

func (e *experiment) trial(id string) *TrialState {
	for _, ts := range e.state.Trials {
		if ts.ID == id {
			return ts
		}
	}
	panic("tune: unknown trial " + id)
}
