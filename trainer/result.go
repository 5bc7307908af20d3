package trainer

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Metrics are the values one Report records.
type Metrics map[string]any

// ScoredCheckpoint is a kept checkpoint with the metrics reported with it.
type ScoredCheckpoint struct {
	Checkpoint *Checkpoint
	Metrics    Metrics
}

// Result is what a run left behind (Ray's Result).
type Result struct {
	// Metrics are the last metrics rank 0 reported.
	Metrics Metrics
	// Checkpoint is the latest committed checkpoint, or nil.
	Checkpoint *Checkpoint
	// BestCheckpoints are the kept checkpoints, best first by the score
	// attribute (most recent first without one).
	BestCheckpoints []ScoredCheckpoint
	// Path is the run's directory; MetricsPath its metrics history
	// (progress.jsonl, one JSON record per report). On an object store
	// they are the run's s3:// location and its progress segments' prefix.
	Path, MetricsPath string
	// Errors holds one entry per failed worker when the run failed, the
	// first failure (the cause) first.
	Errors []RankError
	// Recovered lists the worker failures the run survived, in order.
	Recovered []RankError
	// Replaced lists, in order, the workers that were stopped on their own
	// (a SIGTERM to that worker alone) and replaced while the run went on
	// from the checkpoint the gang agreed on: no failures.
	Replaced []RankError
}

// RankError is one worker's failure.
type RankError struct {
	Rank     int
	ExitCode int
	Message  string
}

func (e RankError) Error() string {
	return fmt.Sprintf("rank %d: %s", e.Rank, e.Message)
}

// ErrRunFailed is wrapped by the error Fit returns when a worker failed.
var ErrRunFailed = errors.New("run failed")

// LoadResult reads a run's storage and combines it with how its workers
// ended (out may be nil) into a Result. When a worker failed it returns the
// Result together with an error wrapping ErrRunFailed that names the cause.
// opts reach the storage (WithStorageOptions for an s3:// storage path).
func LoadResult(storagePath, run string, policy workerenv.CheckpointPolicy, out *launch.Outcome, opts ...storage.Option) (*Result, error) {
	if storage.IsObjectPath(storagePath) {
		return loadObjectResult(storagePath, run, policy, out, opts)
	}
	st, err := storage.OpenReadOnly(storagePath, run, storagePolicy(policy))
	if err != nil {
		return nil, fmt.Errorf("open run storage: %w", err)
	}
	defer st.Close()
	res := &Result{Path: st.Dir(), MetricsPath: filepath.Join(st.Dir(), storage.ProgressFile)}
	recs, err := st.Records()
	if err != nil {
		return nil, fmt.Errorf("read metrics history: %w", err)
	}
	if len(recs) > 0 {
		res.Metrics = Metrics(recs[len(recs)-1].Metrics)
	}
	_, path, ok, err := st.Latest()
	if err != nil {
		return nil, fmt.Errorf("find latest checkpoint: %w", err)
	}
	if ok {
		res.Checkpoint = CheckpointFromDirectory(path)
	}
	best, err := st.Best(0)
	if err != nil {
		return nil, fmt.Errorf("rank checkpoints: %w", err)
	}
	for _, r := range best {
		res.BestCheckpoints = append(res.BestCheckpoints, ScoredCheckpoint{
			Checkpoint: CheckpointFromDirectory(filepath.Join(st.Dir(), r.Checkpoint)),
			Metrics:    Metrics(r.Metrics),
		})
	}
	return withOutcome(res, out)
}

// withOutcome adds how the workers ended to a Result read from storage.
func withOutcome(res *Result, out *launch.Outcome) (*Result, error) {
	if out == nil {
		return res, nil
	}
	for _, r := range out.Restarts {
		res.Recovered = append(res.Recovered, RankError{Rank: r.Rank, ExitCode: r.ExitCode, Message: r.Message()})
	}
	for _, r := range out.Stopped {
		res.Replaced = append(res.Replaced, RankError{Rank: r.Rank, ExitCode: r.ExitCode, Message: r.Message()})
	}
	if !out.Failed() {
		return res, nil
	}
	stopped := true
	for _, r := range out.Failures() {
		res.Errors = append(res.Errors, RankError{Rank: r.Rank, ExitCode: r.ExitCode, Message: r.Message()})
		stopped = stopped && r.ExitCode == ExitStopped
	}
	if stopped {
		return res, fmt.Errorf("%w: every worker checkpointed and stopped; run again to resume", ErrStopped)
	}
	var msgs []string
	if out.BudgetExhausted != "" {
		msgs = append(msgs, out.BudgetExhausted)
	}
	for _, e := range res.Errors {
		msgs = append(msgs, e.Error())
	}
	return res, fmt.Errorf("%w: %s", ErrRunFailed, strings.Join(msgs, "; "))
}

func storagePolicy(p workerenv.CheckpointPolicy) storage.Policy {
	return storage.Policy{NumToKeep: p.NumToKeep, ScoreAttribute: p.ScoreAttribute, ScoreOrder: p.ScoreOrder}
}
