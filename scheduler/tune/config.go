package tune

import (
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// UnlimitedSamples as NumSamples samples trials until the time budget is
// spent (Ray's num_samples=-1), repeating a grid as often as it takes. The
// built-in searchers make at most 100,000 trials.
const UnlimitedSamples = trainspec.UnlimitedSamples

// Config configures a Tuner: Ray's TuneConfig and RunConfig in one.
type Config struct {
	// Name is the experiment's name; its place is StoragePath/Name, which
	// holds its state and each trial as a run (StoragePath/Name/trial_0003).
	Name string
	// StoragePath is the root of run storage (default "./results"): a
	// directory, or an object store (s3://bucket/prefix), where the
	// experiment's state, lock and trials are all kept, so that a tuner
	// on another machine (a detached tuner Nomad moved) resumes it.
	StoragePath string
	// StorageOptions are an object store's non-secret options.
	StorageOptions workerenv.StorageOptions
	// Instance names this tuner for the experiment's lease on an object
	// store: a detached tuner gives its Nomad allocation's ID. A tuner
	// that finds the lease held by an earlier start of the same instance
	// takes it at once (Nomad starts a task again only after it exited);
	// any other holder is waited for until its lease expires.
	Instance string
	// NumSamples is how many times the grid is sampled (default 1), or
	// UnlimitedSamples: trials are sampled until TimeBudget is spent.
	NumSamples int
	// MaxConcurrentTrials bounds the trials running at once (default 1).
	MaxConcurrentTrials int
	// Metric and Mode (ModeMin or ModeMax) are what the scheduler
	// optimizes and what ResultGrid.Best ranks by.
	Metric, Mode string
	// TimeAttr measures a trial's progress for the scheduler: a reported
	// metric, or TrainingIteration (the default).
	TimeAttr string
	// TimeBudget ends the experiment after this long: running trials are
	// stopped, pending ones not started. Zero is no limit.
	TimeBudget time.Duration
	// Stop ends a trial, TERMINATED, at its first report that meets any of
	// these criteria (Ray's RunConfig stop).
	Stop []StopCriterion
	// Plateau, when set, also ends a trial, TERMINATED, once its metric
	// has stopped moving (Ray's TrialPlateauStopper).
	Plateau *PlateauStop
	// Searcher is SearchRandom (default) or SearchGrid; Seed makes it and
	// the scheduler reproducible.
	Searcher string
	Seed     uint64
	// Search is the searcher's kind and settings, such as TPESettings{};
	// nil is Searcher's variant generator. A model-based searcher makes
	// its NumSamples trials one at a time, as slots free, learning from
	// the results of those before.
	Search SearcherSettings
	// Scheduler is the trial scheduler's kind and settings (FIFO when nil),
	// such as ASHASettings{MaxT: 9}, or a custom SchedulerSettings. Each Fit
	// builds a fresh scheduler from it and replays the recorded results.
	Scheduler SchedulerSettings
	// MaxFailures is each trial's failure budget: how many failed attempts
	// are restarted (from the trial's latest checkpoint); -1 is unlimited.
	MaxFailures int
	// FailFast ends the experiment at the first trial that fails beyond
	// its MaxFailures (Ray's FailureConfig fail_fast; with MaxFailures 0,
	// at its first failure): no more trials start, the running ones are
	// stopped unfinished, to resume on the next Fit, and Fit returns a
	// *TrialFailedError.
	FailFast bool
	// KeepErrored makes a resumed experiment leave its ERROR trials as
	// they are (Ray's resume_errored=False): a detached tuner that Nomad
	// restarts must not run them again each time.
	KeepErrored bool
	// Checkpoint is each trial's checkpoint retention.
	Checkpoint workerenv.CheckpointPolicy
	// PollInterval is how often the progress files of process trials are
	// read (default 200ms).
	PollInterval time.Duration
	// Progress receives the live trial table every ProgressInterval
	// (default 5s) and at the end, and the tuner's notes to the user (the
	// failed trials it retries, a metric the reports lack); nil prints
	// nothing.
	Progress         io.Writer
	ProgressInterval time.Duration
	// Logger receives the tuner's log lines.
	Logger hclog.Logger
}

func (c *Config) defaults() {
	if c.StoragePath == "" {
		c.StoragePath = "./results"
	}
	if c.NumSamples == 0 {
		c.NumSamples = 1
	}
	if c.MaxConcurrentTrials < 1 {
		c.MaxConcurrentTrials = 1
	}
	if c.TimeAttr == "" {
		c.TimeAttr = TrainingIteration
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

func (c *Config) validate() error {
	if c.Name == "" {
		return fmt.Errorf("tune: experiment Name must be set")
	}
	if c.Mode != "" && c.Mode != ModeMin && c.Mode != ModeMax {
		return fmt.Errorf("tune: mode must be %q or %q, got %q", ModeMin, ModeMax, c.Mode)
	}
	if (c.Metric == "") != (c.Mode == "") {
		return fmt.Errorf("tune: metric and mode go together")
	}
	if c.NumSamples < UnlimitedSamples {
		return fmt.Errorf("tune: NumSamples must be at least 1, or UnlimitedSamples (-1); got %d", c.NumSamples)
	}
	if c.NumSamples == UnlimitedSamples && c.TimeBudget <= 0 {
		return fmt.Errorf("tune: UnlimitedSamples samples trials until the time budget is spent: set TimeBudget as well")
	}
	if err := validateStop(c.Stop); err != nil {
		return err
	}
	return c.Plateau.validate()
}
