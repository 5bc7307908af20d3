package consulstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// lease is a Consul TTL session granted by a Store. The server invalidates
// it about 2×TTL after the last renewal (Consul arms its timer at twice the
// TTL), deleting the keys it holds.
type lease struct {
	s   *Store
	id  string
	ttl time.Duration
}

// ID implements rendezvous.Lease: the session ID.
func (l *lease) ID() string { return l.id }

// TTL implements rendezvous.Lease: the TTL granted.
func (l *lease) TTL() time.Duration { return l.ttl }

// Renew implements rendezvous.Lease.
func (l *lease) Renew(ctx context.Context) error {
	cctx, cancel, err := l.s.call(ctx, l.s.cfg.RequestTimeout)
	if err != nil {
		return err
	}
	defer cancel()
	entry, _, err := l.s.client.Session().Renew(l.id, (&capi.WriteOptions{}).WithContext(cctx))
	if err != nil {
		return l.s.fail(ctx, "renew session "+l.id, err)
	}
	if entry == nil {
		l.forget()
		return fmt.Errorf("renew session %s: %w", l.id, rendezvous.ErrLeaseNotFound)
	}
	return nil
}

// KeepAlive implements rendezvous.Lease. It renews every TTL/2 (the
// server keeps a session 2×TTL after its last renewal) and retries a failed
// renewal every second until a whole TTL went by without one, as
// consul/api's RenewPeriodic does; but each renewal is bounded by
// RequestTimeout, where RenewPeriodic bounds none, and one hung on a
// connection the agent no longer answers would outlive the session. It
// returns nil when ctx is done, without destroying the session (Revoke
// does that).
func (l *lease) KeepAlive(ctx context.Context) error {
	every := max(l.ttl/2, time.Millisecond)
	last := time.Now()
	for wait := every; ; {
		if sleepCtx(ctx, wait) != nil {
			return nil
		}
		err := l.Renew(ctx)
		switch {
		case err == nil:
			last, wait = time.Now(), every
			continue
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, rendezvous.ErrClosed):
			return rendezvous.ErrClosed
		case errors.Is(err, rendezvous.ErrLeaseNotFound), time.Since(last) >= l.ttl:
			return fmt.Errorf("keep session %s alive: %w", l.id, err)
		}
		wait = min(time.Second, every)
	}
}

// Revoke implements rendezvous.Lease: destroying the session deletes its
// keys (behaviour delete).
func (l *lease) Revoke(ctx context.Context) error {
	if err := l.s.destroy(ctx, l.id); err != nil {
		return err
	}
	l.forget()
	return nil
}

// forget drops the lease from the ones Close destroys.
func (l *lease) forget() {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	delete(l.s.leases, l.id)
}
