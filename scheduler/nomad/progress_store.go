package nomad

import (
	"context"
	"fmt"
	"sync"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// StoreProgress reads a run's reports from its storage on an object store
// (an s3:// storage path), which every machine with credentials reaches:
// the CLI needs no shared mount. It keeps the run open between calls, so
// each Latest reads only the progress segments written since the last.
// Close it when done.
type StoreProgress struct {
	StoragePath string
	Run         string
	// Options are the store's (storage.WithStorageOptions).
	Options []storage.Option

	mu sync.Mutex
	st storage.RunStore // guarded by mu; opened at the first Latest
}

// Latest implements ProgressSource. ctx bounds the run's calls from the
// first Latest on: pass the context of the whole follow.
func (p *StoreProgress) Latest(ctx context.Context) (storage.Record, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st == nil {
		st, err := storage.OpenStoreReadOnly(ctx, p.StoragePath, p.Run, storage.Policy{}, p.Options...)
		if err != nil {
			return storage.Record{}, fmt.Errorf("reading progress: %w", err)
		}
		p.st = st
	}
	recs, err := p.st.Records()
	if err != nil {
		return storage.Record{}, fmt.Errorf("reading progress: %w", err)
	}
	if len(recs) == 0 {
		return storage.Record{}, ErrNoProgress
	}
	return recs[len(recs)-1], nil
}

// Close releases the run.
func (p *StoreProgress) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st == nil {
		return nil
	}
	return p.st.Close()
}
