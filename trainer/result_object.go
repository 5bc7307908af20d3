package trainer

import (
	"context"
	"fmt"
	"slices"

	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// loadObjectResult is LoadResult for a run on an object store. It reads
// the records and which checkpoints exist, and downloads nothing: the
// Result's checkpoints are named by their s3:// location. Called with the
// launch's outcome, it retries for the workers' default outage grace.
func loadObjectResult(storagePath, run string, policy workerenv.CheckpointPolicy, out *launch.Outcome, opts []storage.Option) (*Result, error) {
	ctx := context.Background()
	open := opts
	if out != nil {
		// The launcher reads the run it has just launched: through an
		// outage of the store, as the run's workers wrote it.
		open = append(slices.Clip(opts), storage.WithRetryFor(workerenv.DefaultStorageOutageGrace))
	}
	st, err := storage.OpenStoreReadOnly(ctx, storagePath, run, storagePolicy(policy), open...)
	if err != nil {
		return nil, fmt.Errorf("open run storage: %w", err)
	}
	defer st.Close()
	res := &Result{Path: storage.RunLocation(storagePath, run), MetricsPath: storage.ProgressLocation(storagePath, run)}
	recs, err := st.Records()
	if err != nil {
		return nil, fmt.Errorf("read metrics history: %w", err)
	}
	if len(recs) > 0 {
		res.Metrics = Metrics(recs[len(recs)-1].Metrics)
	}
	best, err := st.Best(0)
	if err != nil {
		return nil, fmt.Errorf("rank checkpoints: %w", err)
	}
	for _, r := range best {
		res.BestCheckpoints = append(res.BestCheckpoints, ScoredCheckpoint{
			Checkpoint: &Checkpoint{dir: storage.CheckpointLocation(storagePath, run, r.Checkpoint), opts: opts},
			Metrics:    Metrics(r.Metrics),
		})
	}
	if r, ok := storage.Newest(best); ok {
		res.Checkpoint = &Checkpoint{dir: storage.CheckpointLocation(storagePath, run, r.Checkpoint), opts: opts}
	}
	return withOutcome(res, out)
}
