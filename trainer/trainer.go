package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// TrainFunc is the training function each worker runs (Ray's
// train_loop_per_worker). It returns when training is done; an error fails
// the run with this rank's error.
type TrainFunc func(ctx context.Context, s *Session) error

// Scaling says how many workers train together (Ray's ScalingConfig).
// NumWorkers is a gang of a fixed size; Min and Max (Ray's num_workers =
// (min, max)) make it elastic: Max workers are started, training starts
// once Min have joined and no more came within Settle, a gang that loses
// workers goes on at a smaller size while it has Min, and a replacement
// joins at the next checkpoint.
type Scaling struct {
	NumWorkers int  // workers in a gang of a fixed size; at least 1
	UseGPU     bool // each worker gets a GPU (cluster runs)
	// Min and Max bound an elastic gang (set Max, and NumWorkers 0).
	Min, Max int
	// Settle is how long an elastic gang with Min workers waits for more
	// before it starts (default 3s).
	Settle time.Duration
}

// workers is the most and the fewest workers the gang trains with.
func (s Scaling) workers() (min, max int, err error) {
	if s.Max == 0 && s.Min == 0 {
		if s.NumWorkers < 1 {
			return 0, 0, fmt.Errorf("scaling: NumWorkers must be at least 1, got %d", s.NumWorkers)
		}
		return s.NumWorkers, s.NumWorkers, nil
	}
	switch {
	case s.NumWorkers != 0 && s.NumWorkers != s.Max:
		return 0, 0, fmt.Errorf("scaling: set NumWorkers (%d) or Min and Max (%d, %d), not both", s.NumWorkers, s.Min, s.Max)
	case s.Min < 1:
		return 0, 0, fmt.Errorf("scaling: Min must be at least 1, got %d", s.Min)
	case s.Max < s.Min:
		return 0, 0, fmt.Errorf("scaling: Max (%d) is below Min (%d)", s.Max, s.Min)
	}
	return s.Min, s.Max, nil
}

// CheckpointConfig says which checkpoints to keep (Ray's CheckpointConfig).
type CheckpointConfig struct {
	NumToKeep      int    // 0 keeps every checkpoint
	ScoreAttribute string // metric used to rank checkpoints; empty ranks by recency
	ScoreOrder     string // "max" or "min" (default "max")
	// AsyncUpload makes Report return once a checkpoint is staged
	// locally, with its upload and commit going on in the background, in
	// order (see Session.Report). nil is the default: on for an s3://
	// StoragePath, where an upload takes network time a training step
	// should not wait for, off for a directory, where a commit is a
	// rename. Use Async(true) or Async(false) to choose.
	AsyncUpload *bool
	// Staging says where NewCheckpointDir builds checkpoints on an
	// object store: "disk" (the default: the node's cache directory) or
	// "memory" (a RAM-backed directory, /dev/shm), so that a training
	// step that writes a checkpoint pays a memory copy rather than a disk
	// write, as PyTorch's async_save stages to host memory. The files
	// move to the node's cache directory as their upload ends. It needs
	// free memory for two checkpoints per node (one uploading, one
	// built); without a RAM-backed /dev/shm it is "disk", with a warning.
	// A directory StoragePath ignores it.
	Staging string
	// ResumeFrom is a checkpoint to start from while the run has none of
	// its own (Ray's resume_from_checkpoint): where a Result names one
	// (Checkpoint.Path: an s3:// location or a checkpoint directory), such
	// as another run's, to fine-tune it or to train it on. GetCheckpoint
	// returns a checked copy of it until the run commits a checkpoint;
	// from then on, a restart resumes from the run's own. The run's step
	// count starts at 0, and the checkpoint is never changed or counted
	// among the run's. On S3 it is read with the run's storage options
	// and credentials.
	ResumeFrom string
}

// Async returns a pointer to on, for CheckpointConfig.AsyncUpload.
func Async(on bool) *bool { return &on }

// FailureConfig is the gang's failure budget (Ray's FailureConfig).
type FailureConfig struct {
	// MaxFailures is how many times the gang may lose a worker and
	// recover (restart it, rejoin, restore the latest checkpoint); -1 is
	// unlimited, 0 fails the run at the first failure. A failure of the
	// training function itself (an error or a panic) is never retried.
	MaxFailures int
	// StallFloor and StallFactor set the progress watchdog: when no
	// collective completes for max(StallFloor, StallFactor × the median
	// time between collectives) the gang is declared hung and re-forms
	// (defaults 2m and 20).
	StallFloor  time.Duration
	StallFactor float64
	// RejoinTimeout is how long a worker may stay out of a re-forming gang
	// before it is presumed hung and replaced (default 20s, twice the
	// time in which its peers notice that it is gone).
	RejoinTimeout time.Duration
}

// Run names a run and where it keeps its results (Ray's RunConfig).
type Run struct {
	Name        string // run name; storage lives under StoragePath/Name
	StoragePath string // root directory of run storage (default "./results")
	Checkpoint  CheckpointConfig
	Failure     FailureConfig
	// Storage holds the non-secret options of an s3://bucket/prefix
	// StoragePath (endpoint, region, path style); credentials come from
	// the AWS chain.
	Storage workerenv.StorageOptions
}

// Trainer runs one training function on a gang of workers.
type Trainer struct {
	fn      TrainFunc
	scaling Scaling
	run     Run
	config  any

	// Command and Args start one worker process. They default to this
	// program and its arguments; tests point Args at one test function.
	Command string
	Args    []string
	// Stdout and Stderr receive the workers' output, each line prefixed with
	// "[rank N] ". They default to os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// Logger receives the launcher's own log lines. It defaults to
	// warnings and errors on Stderr.
	Logger hclog.Logger
}

// New returns a Trainer that runs fn on scaling.NumWorkers workers with the
// given run settings. config is the training loop config; it reaches every
// worker as JSON (Session.DecodeConfig).
func New(fn TrainFunc, scaling Scaling, run Run, config any) *Trainer {
	return &Trainer{fn: fn, scaling: scaling, run: run, config: config,
		Stdout: os.Stdout, Stderr: os.Stderr}
}

// Fit trains. In the launching process it starts the workers as copies of
// this program, waits for them and returns the run's Result; in a worker
// process it runs the training function and exits the process.
func (t *Trainer) Fit(ctx context.Context) (*Result, error) {
	if workerenv.IsWorker() {
		os.Exit(RunWorker(ctx, t.fn))
	}
	minWorkers, numWorkers, err := t.scaling.workers()
	if err != nil {
		return nil, err
	}
	if t.run.Name == "" {
		return nil, errors.New("run: Name must be set")
	}
	root := t.run.StoragePath
	if root == "" {
		root = "./results"
	}
	cfg, err := json.Marshal(t.config)
	if err != nil {
		return nil, fmt.Errorf("encode train config: %w", err)
	}
	exe, args := t.Command, t.Args
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
	}
	if args == nil {
		args = os.Args[1:]
	}
	policy := workerenv.CheckpointPolicy(t.run.Checkpoint)
	out, err := launch.Launch(ctx, launch.Options{
		Command: exe,
		Args:    args,
		Run: workerenv.Run{
			Name:        t.run.Name,
			NumWorkers:  numWorkers,
			MinWorkers:  minWorkers,
			Settle:      t.scaling.Settle,
			StoragePath: root,
			Storage:     t.run.Storage,
			Config:      cfg,
			Checkpoint:  policy,
			MaxFailures: t.run.Failure.MaxFailures,
			StallFloor:  t.run.Failure.StallFloor, StallFactor: t.run.Failure.StallFactor,
		},
		RejoinTimeout: t.run.Failure.RejoinTimeout,
		Stdout:        t.Stdout,
		Stderr:        t.Stderr,
		Logger:        t.Logger,
		OnMetrics:     onMetrics,
	})
	if err != nil {
		return nil, err
	}
	beforeResult()
	return LoadResult(root, t.run.Name, policy, out, storage.WithStorageOptions(t.run.Storage))
}

// beforeResult runs in Fit between the workers' end and the read of the
// Result; tests replace it.
var beforeResult = func() {}

// onMetrics, when set, is told the workers' metrics URLs as soon as they
// serve them; tests set it, to scrape the workers while they train.
var onMetrics func(urls []string)
