package nomad

import (
	"context"
	"fmt"
	"sync"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// StoreProgress reads a run's reports from its storage, a directory this
// machine mounts or an object store (an s3:// storage path, which every
// machine with credentials reaches: the CLI needs no shared mount). It
// follows the run (storage.Follow), so each Latest reads only what was
// recorded since the last. Close it when done.
type StoreProgress struct {
	StoragePath string
	Run         string
	// Options are the store's (storage.WithStorageOptions).
	Options []storage.Option

	mu   sync.Mutex
	f    *storage.Follower // guarded by mu; opened at the first Latest
	last *storage.Record   // guarded by mu; the newest report read
}

// Latest implements ProgressSource. ctx bounds the run's calls from the
// first Latest on: pass the context of the whole follow.
func (p *StoreProgress) Latest(ctx context.Context) (storage.Record, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		f, err := storage.Follow(ctx, p.StoragePath, p.Run, p.Options...)
		if err != nil {
			return storage.Record{}, fmt.Errorf("reading progress: %w", err)
		}
		p.f = f
	}
	recs, reset, err := p.f.NextRecords()
	if err != nil {
		return storage.Record{}, fmt.Errorf("reading progress: %w", err)
	}
	if reset {
		p.last = nil // a rolled-back history comes whole
	}
	if n := len(recs); n > 0 {
		last := recs[n-1] // a copy: the history read need not stay in memory
		p.last = &last
	}
	if p.last == nil {
		return storage.Record{}, ErrNoProgress
	}
	return *p.last, nil
}

// Close releases the run.
func (p *StoreProgress) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return nil
	}
	err := p.f.Close()
	p.f = nil
	return err
}
