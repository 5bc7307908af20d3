package tune

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Spec is the JSON form of an experiment, read by `nomad-train tune
// spec.json` until train.hcl carries a tune block:
//
//	{
//	  "name": "quickstart-tune",
//	  "builtin": "quickstart",
//	  "num_workers": 1,
//	  "storage_path": "./results",
//	  "config": {"lr": {"loguniform": [0.001, 0.1]}, "batch_size": {"choice": [16, 32, 64]}, "epochs": 9},
//	  "tune": {
//	    "num_samples": 8, "max_concurrent_trials": 2, "metric": "loss", "mode": "min",
//	    "time_budget": "10m", "searcher": "random", "seed": 1, "max_failures": 1,
//	    "scheduler": {"type": "asha", "max_t": 9, "grace_period": 1, "reduction_factor": 3}
//	  }
//	}
//
// Search-space functions are one-key objects anywhere inside config (see
// ParseSpace); PBT's hyperparam_mutations take the same functions or lists.
type Spec struct {
	Name        string          `json:"name"`
	Builtin     string          `json:"builtin,omitempty"`
	Command     []string        `json:"command,omitempty"` // a worker command instead of a builtin
	NumWorkers  int             `json:"num_workers,omitempty"`
	StoragePath string          `json:"storage_path,omitempty"`
	Env         []string        `json:"env,omitempty"` // KEY=VALUE for every worker
	Config      json.RawMessage `json:"config"`
	Checkpoint  struct {
		NumToKeep      int    `json:"num_to_keep,omitempty"`
		ScoreAttribute string `json:"score_attribute,omitempty"`
		ScoreOrder     string `json:"score_order,omitempty"`
	} `json:"checkpoint"`
	Tune TuneSpec `json:"tune"`
}

// TuneSpec is the tune block of a Spec.
type TuneSpec struct {
	NumSamples          int             `json:"num_samples,omitempty"`
	MaxConcurrentTrials int             `json:"max_concurrent_trials,omitempty"`
	Metric              string          `json:"metric,omitempty"`
	Mode                string          `json:"mode,omitempty"`
	TimeAttr            string          `json:"time_attr,omitempty"`
	TimeBudget          string          `json:"time_budget,omitempty"` // a Go duration
	Searcher            string          `json:"searcher,omitempty"`
	Seed                uint64          `json:"seed,omitempty"`
	MaxFailures         int             `json:"max_failures,omitempty"`
	Scheduler           json.RawMessage `json:"scheduler,omitempty"`
}

// ParseSpec decodes a JSON experiment spec into the param space and the
// Config (Name, StoragePath, search and scheduler settings) it describes.
func ParseSpec(data []byte) (*Spec, map[string]any, Config, error) {
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, nil, Config{}, fmt.Errorf("decode tune spec: %w", err)
	}
	if s.Name == "" {
		return nil, nil, Config{}, fmt.Errorf("tune spec: name is required")
	}
	if (s.Builtin == "") == (len(s.Command) == 0) {
		return nil, nil, Config{}, fmt.Errorf("tune spec: set exactly one of builtin and command")
	}
	space := map[string]any{}
	if len(s.Config) > 0 {
		var err error
		if space, err = ParseSpace(s.Config); err != nil {
			return nil, nil, Config{}, fmt.Errorf("tune spec: config: %w", err)
		}
	}
	cfg := Config{
		Name: s.Name, StoragePath: s.StoragePath,
		NumSamples: s.Tune.NumSamples, MaxConcurrentTrials: s.Tune.MaxConcurrentTrials,
		Metric: s.Tune.Metric, Mode: s.Tune.Mode, TimeAttr: s.Tune.TimeAttr,
		Searcher: s.Tune.Searcher, Seed: s.Tune.Seed, MaxFailures: s.Tune.MaxFailures,
		Checkpoint: workerenv.CheckpointPolicy{NumToKeep: s.Checkpoint.NumToKeep,
			ScoreAttribute: s.Checkpoint.ScoreAttribute, ScoreOrder: s.Checkpoint.ScoreOrder},
	}
	if s.Tune.TimeBudget != "" {
		d, err := time.ParseDuration(s.Tune.TimeBudget)
		if err != nil {
			return nil, nil, Config{}, fmt.Errorf("tune spec: time_budget: %w", err)
		}
		cfg.TimeBudget = d
	}
	if len(s.Tune.Scheduler) > 0 {
		sc, err := ParseSchedulerConfig(s.Tune.Scheduler)
		if err != nil {
			return nil, nil, Config{}, fmt.Errorf("tune spec: %w", err)
		}
		cfg.Scheduler = sc
	}
	if err := cfg.validate(); err != nil {
		return nil, nil, Config{}, err
	}
	if _, err := cfg.Scheduler.New(Objective{Metric: cfg.Metric, Mode: cfg.Mode}, 0); err != nil {
		return nil, nil, Config{}, fmt.Errorf("tune spec: scheduler: %w", err)
	}
	return &s, space, cfg, nil
}

// ParseSchedulerConfig decodes a scheduler object; its
// hyperparam_mutations may hold search-space functions.
func ParseSchedulerConfig(data []byte) (SchedulerConfig, error) {
	var sc SchedulerConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return sc, fmt.Errorf("decode scheduler: %w", err)
	}
	if len(sc.HyperparamMutations) > 0 {
		raw, _ := json.Marshal(sc.HyperparamMutations)
		m, err := ParseSpace(raw)
		if err != nil {
			return sc, fmt.Errorf("scheduler: hyperparam_mutations: %w", err)
		}
		sc.HyperparamMutations = m
	}
	return sc, nil
}
