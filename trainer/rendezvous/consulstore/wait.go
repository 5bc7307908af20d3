package consulstore

import (
	"context"
	"errors"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// Blocking queries: Wait and WaitPrefix, paced so that an agent that
// fails is asked again with backoff, never in a tight loop.

// Wait implements rendezvous.Store with blocking queries. When after is the
// version this store last saw for key, the first query blocks at once;
// otherwise a plain read comes first, so a version from elsewhere (or from
// the future) cannot leave it blocked on an index the key never reaches.
func (s *Store) Wait(ctx context.Context, key string, after uint64) (rendezvous.Value, error) {
	s.mu.Lock()
	seen, known := s.seen[key]
	s.mu.Unlock()
	var index uint64
	if known && seen.version == after {
		index = seen.index
	}
	p := s.newPacer()
	for {
		p.start()
		v, last, err := s.get(ctx, key, index, 0)
		if err != nil {
			if err := p.failed(ctx, err); err != nil {
				return rendezvous.Value{}, err
			}
			index = 0
			continue
		}
		p.ok()
		if v.Version != after {
			return v, nil
		}
		// A query that blocked and came back without the index moving on
		// is paced; one whose index moved on saw a real write (to another
		// key: an absent key's index is the whole KV table's) and blocks
		// again at once.
		stalled := index > 0 && last <= index
		index = NextIndex(index, last)
		if stalled {
			if err := p.wait(ctx); err != nil {
				return rendezvous.Value{}, err
			}
		}
	}
}

// NextIndex is the WaitIndex of the next blocking query, given the one just
// used and the X-Consul-Index it returned: 0 (a fresh read) when the index
// went backwards (snapshot restore, tombstones reaped), else the returned
// index clamped to at least 1 so the query blocks.
func NextIndex(prev, last uint64) uint64 {
	if last < prev {
		return 0
	}
	return max(last, 1)
}

// pacer spaces blocking queries that came back with nothing changed, so a
// server that keeps waking us (or resets its index) does not make us spin,
// and retries failed ones with backoff for a grace period.
type pacer struct {
	pause, grace time.Duration
	began        time.Time
	failingSince time.Time     // zero while queries succeed
	backoff      time.Duration // next pause after a failure
}

// maxBackoff caps the pause between failed queries.
const maxBackoff = 2 * time.Second

func (s *Store) newPacer() pacer {
	return pacer{pause: s.cfg.RetryPause, grace: s.cfg.ErrorGrace}
}

func (p *pacer) start() { p.began = time.Now() }

func (p *pacer) ok() { p.failingSince, p.backoff = time.Time{}, 0 }

// failed decides about a failed query: err itself when it is final (the
// caller's context, a closed store) or failures have lasted the grace
// period; otherwise nil after a backoff pause.
func (p *pacer) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, rendezvous.ErrClosed) {
		return err
	}
	if p.failingSince.IsZero() {
		p.failingSince, p.backoff = time.Now(), p.pause
	}
	if time.Since(p.failingSince) >= p.grace {
		return err
	}
	d := p.backoff
	p.backoff = min(2*p.backoff, maxBackoff)
	return sleepCtx(ctx, d)
}

// wait sleeps what remains of pause since start.
func (p *pacer) wait(ctx context.Context) error {
	d := p.pause - time.Since(p.began)
	if d <= 0 {
		return nil
	}
	return sleepCtx(ctx, d)
}

// WaitPrefix implements rendezvous.Store with blocking queries. An index
// that went backwards differs from after, so it is returned: the caller
// passes it back and blocks on the fresh index. After a failed query the
// next listing is returned whatever its index: an agent that restarted
// meanwhile counts again from low numbers and may be back at after with
// other keys.
func (s *Store) WaitPrefix(ctx context.Context, prefix string, after uint64) ([]rendezvous.KeyValue, uint64, error) {
	p := s.newPacer()
	index := after
	failed := false
	for {
		p.start()
		kvs, last, err := s.list(ctx, prefix, index, 0)
		if err != nil {
			if err := p.failed(ctx, err); err != nil {
				return nil, 0, err
			}
			failed, index = true, 0
			continue
		}
		p.ok()
		if last != after || failed {
			return kvs, last, nil
		}
		blocked := index > 0
		index = last
		if blocked {
			if err := p.wait(ctx); err != nil {
				return nil, 0, err
			}
		}
	}
}
