package tune

import (
	"errors"
	"fmt"
	"io"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// ErrNoTuneBlock is FromSpec's error for a spec without a tune block.
var ErrNoTuneBlock = errors.New("no tune block")

// Experiment is what a train.hcl spec with a tune block describes: the
// search space over its config, and the tuner's Config.
type Experiment struct {
	Spec  *trainspec.Spec
	Space map[string]any
	// Config has no Progress yet; StoragePath defaults to ./results.
	Config Config
}

// FromSpec reads the experiment a spec describes. Its errors name the
// part of the spec that is wrong (config, scheduler, search_alg).
func FromSpec(spec *trainspec.Spec) (*Experiment, error) {
	t := spec.Tune
	if t == nil {
		return nil, ErrNoTuneBlock
	}
	space, err := ParseSpace(spec.ConfigJSON)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	sched, err := ParseScheduler(t.Scheduler.Type, t.Scheduler.SettingsJSON, t.Metric)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	search, err := ParseSearcher(t.SearchAlg.Type, t.SearchAlg.SettingsJSON, t.Metric)
	if err != nil {
		return nil, fmt.Errorf("search_alg: %w", err)
	}
	if err := refuseGrid(t.SearchAlg.Type, space); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	run := spec.RunSpec()
	cfg := Config{Name: spec.Name, StoragePath: spec.Run.StoragePath,
		NumSamples: t.NumSamples, MaxConcurrentTrials: t.MaxConcurrentTrials,
		Metric: t.Metric, Mode: t.Mode, TimeAttr: t.TimeAttr, TimeBudget: t.TimeBudget,
		Searcher: t.Searcher, Seed: uint64(t.Seed), MaxFailures: t.MaxFailures, FailFast: t.FailFast, Scheduler: sched, Search: search,
		Checkpoint: run.Checkpoint}
	for _, c := range t.Stop {
		cfg.Stop = append(cfg.Stop, StopCriterion{Metric: c.Metric, Value: c.Value, AtMost: c.AtMost})
	}
	if p := t.Plateau; p != nil {
		cfg.Plateau = &PlateauStop{Metric: p.Metric, Std: p.Std, NumResults: p.NumResults, GracePeriod: p.GracePeriod}
	}
	if cfg.StoragePath == "" {
		cfg.StoragePath = "./results"
	}
	if spec.Run.IsS3() {
		// The experiment on S3: <path>/<experiment>/ holds the state, the
		// tuner's lease and the trials' runs (trial_NNNN).
		cfg.StorageOptions = spec.Run.Storage.Options()
	}
	return &Experiment{Spec: spec, Space: space, Config: cfg}, nil
}

// Trials is how many trials the experiment makes, as its tuner will: for
// the random and grid searchers num_samples times the size of the grid
// (every combination of grid_search values, and of choices with "grid"),
// for a model's (TPE, BOHB) num_samples. It is 0 for UnlimitedSamples,
// which samples until the time budget is spent.
func (x *Experiment) Trials() (int, error) {
	if x.Config.NumSamples == UnlimitedSamples {
		return 0, nil
	}
	s, err := x.Config.searcher(x.Space, Objective{Metric: x.Config.Metric, Mode: x.Config.Mode, TimeAttr: x.Config.TimeAttr})
	if err != nil {
		return 0, err
	}
	return s.Total(), nil
}

// CheckScheduler and CheckSearcher check a tune block's scheduler and
// search_alg settings, for trainspec.ParseOptions.
func CheckScheduler(kind, metric string, settings []byte) error {
	_, err := ParseScheduler(kind, settings, metric)
	return err
}

// CheckSearcher: see CheckScheduler.
func CheckSearcher(kind, metric string, settings []byte) error {
	_, err := ParseSearcher(kind, settings, metric)
	return err
}

// LocalProcesses places the experiment's trials as worker processes on
// this machine, each started as proc says (workerenv.StartFor: this binary
// for a builtin or a wrapped python3 command, a Go trainer itself), with
// the spec's environment, in the spec's directory (a command's script is
// found beside the spec, as `run` finds it). The workers' output goes to stdout and stderr
// when given; stopped trials' workers complain about their cancelled
// context, so by default it is dropped (failures are in the table and
// results.json).
func (x *Experiment) LocalProcesses(proc workerenv.Process, stdout, stderr io.Writer) *Processes {
	b := NewProcesses(nil, x.Spec.Scaling.NumWorkers)
	b.Command, b.Args, b.Dir = proc.Path, proc.Args, x.Spec.Dir()
	b.Env = append(append([]string{}, x.Spec.RunSpec().Env...), proc.Env...)
	b.Stdout, b.Stderr = io.Discard, io.Discard
	if stdout != nil {
		b.Stdout, b.Stderr = stdout, stderr
	}
	return b
}
