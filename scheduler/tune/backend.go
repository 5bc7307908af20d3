package tune

import (
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

	"github.com/nomad-train/nomad-train/scheduler/local"
	"github.com/nomad-train/nomad-train/trainer"
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
	// Reported, when set, is called by a backend that runs the trial in
	// this process after each report is on storage; it returns once the
	// tuner has acted on the report (with ctx's error when the tuner
	// stopped the trial). Backends that run processes do not call it: the
	// tuner follows their progress files.
	Reported func(ctx context.Context) error
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

// Processes is the local backend: each trial is a gang of worker processes
// started by scheduler/local, like a `nomad-train run`. Every trial pays for
// process start-up and rendezvous.
type Processes struct {
	// Command and Args start one worker process. They default to this
	// program and its arguments (the helper-process idiom: Tuner.Fit runs
	// Fn when the program starts as a worker).
	Command string
	Args    []string
	// Env adds KEY=VALUE entries to every worker's environment.
	Env []string
	// NumWorkers is the gang size of every trial (default 1).
	NumWorkers int
	// StopGrace is how long a stopped worker gets between SIGTERM and
	// SIGKILL (default 1s). A stopped trial's committed checkpoints are
	// safe whenever it dies, so a short grace bounds the epochs a trial
	// runs after the scheduler stopped it.
	StopGrace time.Duration
	// Stdout and Stderr receive the workers' output, each line prefixed
	// with "[trial_0003] [rank N] " (default: discarded).
	Stdout, Stderr io.Writer
	// Logger receives the launcher's log lines.
	Logger hclog.Logger

	fn  trainer.TrainFunc
	out sync.Mutex // serializes the trials' writes to Stdout and Stderr
}

// NewProcesses returns the local process backend that runs fn in copies of
// this program, numWorkers per trial.
func NewProcesses(fn trainer.TrainFunc, numWorkers int) *Processes {
	return &Processes{fn: fn, NumWorkers: numWorkers}
}

// workerFunc is the training function a worker copy of this program runs.
func (p *Processes) workerFunc() trainer.TrainFunc { return p.fn }

// Run launches the trial's gang and waits for it.
func (p *Processes) Run(ctx context.Context, t TrialSpec) error {
	o := local.Options{
		Command: p.Command, Args: p.Args, Env: p.Env,
		NumWorkers: max(p.NumWorkers, 1), RunName: t.ID, StoragePath: t.StoragePath,
		Config: t.Config, Checkpoint: t.Checkpoint,
		StopGrace: p.StopGrace,
		Logger:    p.Logger,
	}
	if o.Command == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable: %w", err)
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
	out, err := local.Launch(ctx, o)
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

// linePrefixer prefixes every write (local.Launch writes whole lines); the
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

// errStopped is returned by an in-process trial stopped by the tuner.
var errStopped = errors.New("trial stopped")
