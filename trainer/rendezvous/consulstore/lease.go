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

// KeepAlive implements rendezvous.Lease with the client's RenewPeriodic,
// which renews at TTL/2 (the server allows 2×TTL) and retries failed
// renewals every second for up to one TTL. It returns nil when ctx is done,
// without destroying the session (Revoke does that).
func (l *lease) KeepAlive(ctx context.Context) error {
	cctx, cancel, err := l.s.call(ctx, 0)
	if err != nil {
		return err
	}
	defer cancel()
	err = l.s.client.Session().RenewPeriodic(l.ttl.String(), l.id, (&capi.WriteOptions{}).WithContext(cctx), nil)
	switch {
	case ctx.Err() != nil:
		return nil
	case l.s.base.Err() != nil:
		return rendezvous.ErrClosed
	case errors.Is(err, capi.ErrSessionExpired):
		l.forget()
		return fmt.Errorf("keep session %s alive: %w", l.id, rendezvous.ErrLeaseNotFound)
	case err != nil:
		return fmt.Errorf("keep session %s alive: %w", l.id, err)
	}
	return fmt.Errorf("keep session %s alive: renewals stopped", l.id)
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
