package tune

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// TrialSpec is what a backend needs to place one trial. A trial is a run:
// its run name is ID, under the experiment's directory StoragePath, and its
// workers report into StoragePath/ID/progress.jsonl.
type TrialSpec struct {
	ID          string          // "trial_0003": the trial's run name
	StoragePath string          // the experiment directory
	Config      json.RawMessage // the sampled config, JSON
	Checkpoint  workerenv.CheckpointPolicy
	// Storage holds the options of an object-store StoragePath.
	Storage workerenv.StorageOptions
	// Reported, when set, is called by a backend that runs the trial in
	// this process after each report is on storage; it returns once the
	// tuner has acted on the report (with ctx's error when the tuner
	// stopped the trial). Backends that run processes do not call it: the
	// tuner follows their progress files.
	Reported func(ctx context.Context) error
	// Waiting, when set, is called by a backend whose trial waits for
	// capacity before its workers can start (a Nomad gang that does not fit
	// while other jobs hold the nodes): with why while it waits, and with ""
	// once it is placed. The tuner shows the trial PENDING, with why as its
	// reason, until then (Ray Tune's trials pending on resources).
	Waiting func(ctx context.Context, why string)
}

// Backend places trials: local processes (Processes), goroutines
// (InProcess) or Nomad jobs (NomadJobs). The tuner calls Run once per
// attempt of a trial, from its own goroutine.
type Backend interface {
	// Run starts the trial's workers, waits until they end and returns nil
	// when the training function finished. Cancelling ctx stops the trial
	// through the backend (early stopping, exploit, shutdown); Run still
	// waits for the workers to be gone before it returns.
	Run(ctx context.Context, t TrialSpec) error
}

// Preparer is implemented by backends that can get a trial ready before a
// slot frees up (open its storage, start warm workers). While every slot
// is busy, the tuner calls Prepare for the trial it will start next; at the
// end of Fit it calls Release to drop what was prepared and not run.
type Preparer interface {
	Prepare(t TrialSpec)
	Release()
}

// InProcessReports is implemented by backends whose trials call
// TrialSpec.Reported after each report: the tuner hears of their reports
// from them and need not watch their progress files.
type InProcessReports interface {
	InProcessReports() bool
}

// SlotFreedOnStop is implemented by backends whose trials stop doing work
// the moment they are told to stop, so that their slot may start the next
// trial while the stopped one winds down (its processes exit, the launcher
// reaps them). A backend whose stopped trials hold resources someone else
// admits against (a Nomad job's allocations, until they end) must not.
type SlotFreedOnStop interface {
	SlotFreedOnStop() bool
}

// SlotFreedOnStop is true: a stopped trial's workers get SIGTERM and
// train no further (their committed checkpoints are safe); a restart of
// the same trial still waits until they are gone.
func (p *Processes) SlotFreedOnStop() bool { return true }

// Processes is the local backend: each trial is a gang of worker processes
// started by trainer/launch, like a `nomad-train run`. Every trial pays for
// process start-up and rendezvous.
//
// It is a Preparer when its workers are copies of this program (Command
// unset, the helper-process idiom): while every slot is busy it starts the
// next trials' worker processes, which wait in RunWorker until their trial
// runs, so a freed slot does not wait for a process to start (as Ray's
// reuse_actors saves actor start-up). Workers of any other command start
// when their trial runs.
type Processes struct {
	// Command and Args start one worker process. They default to this
	// program and its arguments (the helper-process idiom: Tuner.Fit runs
	// Fn when the program starts as a worker).
	Command string
	Args    []string
	// Env adds KEY=VALUE entries to every worker's environment.
	Env []string
	// Dir is the workers' working directory (launch.Options.Dir), where a
	// command's relative script path (python3 train.py) is found: a
	// spec's directory, as for `run`. "" is this process's.
	Dir string
	// NumWorkers is the gang size of every trial (default 1).
	NumWorkers int
	// StopGrace is how long a stopped worker gets between SIGTERM and
	// SIGKILL (default 1s). A stopped trial's committed checkpoints are
	// safe whenever it dies, so a short grace bounds the epochs a trial
	// runs after the scheduler stopped it.
	StopGrace time.Duration
	// NoPreStart turns off starting the next trials' workers early.
	NoPreStart bool
	// Stdout and Stderr receive the workers' output, each line prefixed
	// with "[trial_0003] [rank N] " (default: discarded).
	Stdout, Stderr io.Writer
	// Logger receives the launcher's log lines.
	Logger hclog.Logger

	fn  trainer.TrainFunc
	out sync.Mutex // serializes the trials' writes to Stdout and Stderr

	mu       sync.Mutex           // guards prepared
	prepared map[string]*prestart // trial -> its workers, started and held
}

// NewProcesses returns the local process backend that runs fn in copies of
// this program, numWorkers per trial.
func NewProcesses(fn trainer.TrainFunc, numWorkers int) *Processes {
	return &Processes{fn: fn, NumWorkers: numWorkers}
}

// workerFunc is the training function a worker copy of this program runs.
func (p *Processes) workerFunc() trainer.TrainFunc { return p.fn }

// options are the launcher's options for the trial.
func (p *Processes) options(t TrialSpec) (launch.Options, error) {
	o := launch.Options{
		Command: p.Command, Args: p.Args,
		Run: workerenv.Run{Env: p.Env, NumWorkers: max(p.NumWorkers, 1), Name: t.ID, StoragePath: t.StoragePath,
			Storage: t.Storage, Config: t.Config, Checkpoint: t.Checkpoint},
		Dir:       p.Dir,
		StopGrace: p.StopGrace,
		Logger:    p.Logger,
	}
	if o.Command == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("find own executable: %w", err)
		}
		o.Command = exe
	}
	if o.Args == nil {
		o.Args = os.Args[1:]
	}
	if o.StopGrace <= 0 {
		o.StopGrace = time.Second
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	o.Logger = o.Logger.With("trial", t.ID)
	if p.Stdout != nil {
		o.Stdout = &linePrefixer{mu: &p.out, w: p.Stdout, prefix: "[" + t.ID + "] "}
	}
	if p.Stderr != nil {
		o.Stderr = &linePrefixer{mu: &p.out, w: p.Stderr, prefix: "[" + t.ID + "] "}
	}
	return o, nil
}

// Run launches the trial's gang (or lets its pre-started one begin) and
// waits for it.
func (p *Processes) Run(ctx context.Context, t TrialSpec) error {
	if pre := p.take(t); pre != nil {
		pre.gate.open()
		stop := context.AfterFunc(ctx, pre.cancel)
		r := <-pre.done
		stop()
		pre.gate.close()
		return trialOutcome(t, r.out, r.err)
	}
	o, err := p.options(t)
	if err != nil {
		return err
	}
	out, err := launch.Launch(ctx, o)
	return trialOutcome(t, out, err)
}

// trialOutcome is Run's error for a launch's outcome.
func trialOutcome(t TrialSpec, out *launch.Outcome, err error) error {
	if err != nil {
		return fmt.Errorf("launch trial %s: %w", t.ID, err)
	}
	if !out.Failed() {
		return nil
	}
	var msgs []string
	for _, r := range out.Failures() {
		msgs = append(msgs, fmt.Sprintf("rank %d: %s", r.Rank, r.Message()))
	}
	return fmt.Errorf("%w: %s", trainer.ErrRunFailed, strings.Join(msgs, "; "))
}

// prestart is a trial's gang started ahead of its run and held at a gate.
type prestart struct {
	spec   TrialSpec
	gate   *startGate
	cancel context.CancelFunc // stops the gang
	done   chan launched      // the launch's result, once
}

type launched struct {
	out *launch.Outcome
	err error
}

// Prepare starts the trial's workers, held until Run, when they are copies
// of this program.
func (p *Processes) Prepare(t TrialSpec) {
	if p.NoPreStart || p.fn == nil || p.Command != "" {
		return
	}
	p.mu.Lock()
	if pre, ok := p.prepared[t.ID]; ok {
		if pre.matches(t) {
			p.mu.Unlock()
			return
		}
		delete(p.prepared, t.ID)
		defer pre.discard()
	}
	defer p.mu.Unlock()
	o, err := p.options(t)
	if err != nil {
		return // Run reports it
	}
	g, err := newStartGate()
	if err != nil {
		return // Run starts the trial the ordinary way
	}
	o.Env = append(append([]string(nil), o.Env...), StartGateEnv+"="+g.addr())
	ctx, cancel := context.WithCancel(context.Background())
	pre := &prestart{spec: t, gate: g, cancel: cancel, done: make(chan launched, 1)}
	go func() {
		out, err := launch.Launch(ctx, o)
		pre.done <- launched{out, err}
	}()
	if p.prepared == nil {
		p.prepared = map[string]*prestart{}
	}
	p.prepared[t.ID] = pre
}

// Release stops every pre-started gang that did not run.
func (p *Processes) Release() {
	p.mu.Lock()
	pres := p.prepared
	p.prepared = nil
	p.mu.Unlock()
	for _, pre := range pres {
		pre.discard()
	}
}

// take returns the trial's pre-started gang when it was started for this
// very attempt (same config and checkpoint policy), else nil.
func (p *Processes) take(t TrialSpec) *prestart {
	p.mu.Lock()
	pre := p.prepared[t.ID]
	delete(p.prepared, t.ID)
	p.mu.Unlock()
	if pre != nil && !pre.matches(t) {
		pre.discard()
		return nil
	}
	return pre
}

func (pre *prestart) matches(t TrialSpec) bool {
	return bytes.Equal(pre.spec.Config, t.Config) && pre.spec.Checkpoint == t.Checkpoint &&
		pre.spec.StoragePath == t.StoragePath
}

// discard stops the held gang and waits for it.
func (pre *prestart) discard() {
	pre.cancel()
	<-pre.done
	pre.gate.close()
}

// linePrefixer prefixes every write (launch.Launch writes whole lines); the
// mutex is shared by every trial writing to the same writer.
type linePrefixer struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
}

func (l *linePrefixer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := io.WriteString(l.w, l.prefix+string(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ErrUnrunnable is wrapped by a backend's error when the trial can never
// run as asked (a Nomad gang that no node of the cluster could hold): the
// trial ends ERROR at once, without max_failures' retries.
var ErrUnrunnable = errors.New("trial cannot run on this cluster")

// errStopped is returned by an in-process trial stopped by the tuner.
var errStopped = errors.New("trial stopped")
