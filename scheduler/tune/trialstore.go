package tune

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// trialStore is where an experiment's trials keep their runs: the
// experiment's place (a directory, or a prefix on an object store), each
// trial a run named by its ID. What the trials write is read only through
// storage.
type trialStore struct {
	root string
	opts []storage.Option
}

func newTrialStore(where string, o workerenv.StorageOptions) trialStore {
	if !storage.IsObjectPath(where) {
		return trialStore{root: where}
	}
	return trialStore{root: where, opts: []storage.Option{storage.WithStorageOptions(o)}}
}

// TrialRuns returns where the experiment at where keeps its trials'
// runs, as the tuner reads them: the storage path and the options to open
// it with. Trial id's run is the run named id there. An experiment whose
// state was kept apart from its trials (an older tuner kept it in a local
// directory, the trials on S3) names their place in TrialStorage.
func (st *ExperimentState) TrialRuns(where string) (root string, opts []storage.Option) {
	var o workerenv.StorageOptions
	if st.TrialStorageOptions != nil {
		o = *st.TrialStorageOptions
	}
	if st.TrialStorage != "" {
		where = st.TrialStorage
	}
	s := newTrialStore(where, o)
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
	if !storage.IsObjectPath(cfg.StoragePath) {
		return workerenv.StorageOptions{}
	}
	return cfg.StorageOptions
}

// storageOpts are the options the tuner opens the experiment's place
// with: on an object store it retries what may pass for the workers'
// default outage grace, as its trials' workers do, so that a short outage
// of the S3 server does not end the tuner (its lease's renewal failing
// would fail every later write of the experiment's state).
func (cfg Config) storageOpts() []storage.Option {
	return tunerStorage(newTrialStore(cfg.StoragePath, cfg.StorageOptions))
}

// tunerStorage is the tuner's options for st's place.
func tunerStorage(st trialStore) []storage.Option {
	if st.opts == nil {
		return nil
	}
	return append(slices.Clip(st.opts), storage.WithRetryFor(workerenv.DefaultStorageOutageGrace))
}
