package tune

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// trialStore is where an experiment's trials keep their runs: the
// experiment directory (the default), or Config.TrialStorage, an object
// store (s3://bucket/prefix). The experiment's own state and lock stay in
// the experiment directory either way; what the trials write is read only
// through storage.
type trialStore struct {
	root string
	opts []storage.Option
}

func newTrialStore(expDir string, cfg Config) trialStore {
	if cfg.TrialStorage == "" {
		return trialStore{root: expDir}
	}
	return trialStore{root: cfg.TrialStorage, opts: []storage.Option{storage.WithStorageOptions(cfg.TrialStorageOptions)}}
}

// TrialRuns returns where the experiment in expDir keeps its trials'
// runs, as the tuner reads them: the storage path (expDir itself, or the
// object store the state names) and the options to open it with. Trial
// id's run is the run named id there.
func (st *ExperimentState) TrialRuns(expDir string) (root string, opts []storage.Option) {
	cfg := Config{TrialStorage: st.TrialStorage}
	if st.TrialStorageOptions != nil {
		cfg.TrialStorageOptions = *st.TrialStorageOptions
	}
	s := newTrialStore(expDir, cfg)
	return s.root, s.opts
}

// remote reports whether the trials are kept on an object store.
func (s trialStore) remote() bool { return storage.IsObjectPath(s.root) }

// location names trial id's run, for people.
func (s trialStore) location(id string) string { return storage.RunLocation(s.root, id) }

// checkpoint names a checkpoint of trial id: a directory, or the
// checkpoint's location on the object store.
func (s trialStore) checkpoint(id, name string) string {
	if s.remote() {
		return s.location(id) + "/checkpoints/" + name
	}
	return filepath.Join(s.root, id, name)
}

// open opens trial id's run for reading. ctx bounds the store's calls for
// its whole life.
func (s trialStore) open(ctx context.Context, id string, p storage.Policy) (storage.RunStore, error) {
	st, err := storage.OpenStoreReadOnly(ctx, s.root, id, p, s.opts...)
	if err != nil {
		return nil, fmt.Errorf("open trial %s: %w", id, err)
	}
	return st, nil
}

// results reads trial id's records and its best existing checkpoint
// under p (nil when it has none).
func (s trialStore) results(ctx context.Context, id string, p storage.Policy) ([]storage.Record, *storage.Record, error) {
	st, err := s.open(ctx, id, p)
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	recs, err := st.Records()
	if err != nil {
		return nil, nil, fmt.Errorf("read trial %s: %w", id, err)
	}
	best, err := st.Best(1)
	if err != nil {
		return nil, nil, fmt.Errorf("rank checkpoints of trial %s: %w", id, err)
	}
	if len(best) == 0 {
		return recs, nil, nil
	}
	return recs, &best[0], nil
}

// workerStorage is what a trial's workers get of the store's options.
func (cfg Config) workerStorage() workerenv.StorageOptions {
	if cfg.TrialStorage == "" {
		return workerenv.StorageOptions{}
	}
	return cfg.TrialStorageOptions
}
