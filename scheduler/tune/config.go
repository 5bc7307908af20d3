package tune

import (
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Config configures a Tuner: Ray's TuneConfig and RunConfig in one.
type Config struct {
	// Name is the experiment's name; its directory is StoragePath/Name and
	// each trial is a run in it (StoragePath/Name/trial_0003).
	Name string
	// StoragePath is the root of run storage (default "./results").
	StoragePath string
	// NumSamples is how many times the grid is sampled (default 1).
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
	// Searcher is SearchRandom (default) or SearchGrid; Seed makes it and
	// the scheduler reproducible.
	Searcher string
	Seed     uint64
	// Scheduler picks and configures the trial scheduler (FIFO when empty).
	Scheduler SchedulerConfig
	// NewScheduler, when set, builds the scheduler instead (a custom one);
	// each Fit builds a fresh one and replays the recorded results into it.
	NewScheduler func(Objective) (Scheduler, error)
	// MaxFailures is each trial's failure budget: how many failed attempts
	// are restarted (from the trial's latest checkpoint); -1 is unlimited.
	MaxFailures int
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
	if c.NumSamples < 1 {
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
	return nil
}

// Scheduler types.
const (
	SchedulerFIFO   = "fifo"
	SchedulerASHA   = "asha"
	SchedulerMedian = "median"
	SchedulerPBT    = "pbt"
)

// SchedulerConfig selects a trial scheduler and its settings; fields that
// do not apply to Type are ignored, zero means the scheduler's default.
type SchedulerConfig struct {
	Type string `json:"type"` // SchedulerFIFO (default), SchedulerASHA, SchedulerMedian or SchedulerPBT

	MaxT            float64 `json:"max_t,omitempty"`            // asha
	GracePeriod     float64 `json:"grace_period,omitempty"`     // asha, median
	ReductionFactor float64 `json:"reduction_factor,omitempty"` // asha
	Brackets        int     `json:"brackets,omitempty"`         // asha

	MinSamplesRequired int `json:"min_samples_required,omitempty"` // median

	PerturbationInterval float64 `json:"perturbation_interval,omitempty"` // pbt
	BurnInPeriod         float64 `json:"burn_in_period,omitempty"`        // pbt
	QuantileFraction     float64 `json:"quantile_fraction,omitempty"`     // pbt
	ResampleProbability  float64 `json:"resample_probability,omitempty"`  // pbt
	// HyperparamMutations maps config paths to a Domain or a list of values.
	HyperparamMutations map[string]any `json:"hyperparam_mutations,omitempty"` // pbt
}

// New builds the scheduler for objective o.
func (c SchedulerConfig) New(o Objective, seed uint64) (Scheduler, error) {
	switch c.Type {
	case "", SchedulerFIFO:
		return FIFO{}, nil
	case SchedulerASHA:
		return NewASHA(ASHAConfig{Objective: o, MaxT: c.MaxT, GracePeriod: c.GracePeriod,
			ReductionFactor: c.ReductionFactor, Brackets: c.Brackets, Seed: seed})
	case SchedulerMedian:
		return NewMedian(MedianConfig{Objective: o, GracePeriod: c.GracePeriod, MinSamplesRequired: c.MinSamplesRequired})
	case SchedulerPBT:
		return NewPBT(PBTConfig{Objective: o, PerturbationInterval: c.PerturbationInterval,
			BurnInPeriod: c.BurnInPeriod, HyperparamMutations: c.HyperparamMutations,
			QuantileFraction: c.QuantileFraction, ResampleProbability: c.ResampleProbability, Seed: seed})
	}
	return nil, fmt.Errorf("unknown scheduler type %q (want fifo, asha, median or pbt)", c.Type)
}
