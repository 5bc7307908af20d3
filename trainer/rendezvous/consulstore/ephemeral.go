package consulstore

import (
	capi "github.com/hashicorp/consul/api"

	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// Ephemeral keys: a lease is a Consul session with no checks, and an
// ephemeral key one the session holds (acquires), so it goes with it.

// Grant implements rendezvous.Store: a session with no checks at all (not
// even the agent's serfHealth, so only the TTL decides), behaviour delete
// and the configured lock delay. A TTL under MinTTL is raised to it;
// Lease.TTL reports the TTL granted.
func (s *Store) Grant(ctx context.Context, ttl time.Duration) (rendezvous.Lease, error) {
	if ttl <= 0 || ttl > rendezvous.MaxLeaseTTL {
		return nil, fmt.Errorf("grant lease: ttl %v out of range", ttl)
	}
	ttl = max(ttl, s.cfg.MinTTL)
	var id string
	err := s.again(ctx, func() error {
		cctx, cancel, err := s.call(ctx, s.cfg.RequestTimeout)
		if err != nil {
			return err
		}
		defer cancel()
		id, _, err = s.client.Session().CreateNoChecks(&capi.SessionEntry{
			Name:      s.cfg.SessionName,
			TTL:       ttl.String(),
			Behavior:  capi.SessionBehaviorDelete,
			LockDelay: s.cfg.LockDelay,
		}, (&capi.WriteOptions{}).WithContext(cctx))
		if err != nil {
			return s.fail(ctx, "create session", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	l := &lease{s: s, id: id, ttl: ttl}
	s.mu.Lock()
	s.leases[id] = l
	s.mu.Unlock()
	return l, nil
}

// PutEphemeral implements rendezvous.Store by acquiring key with the
// lease's session. A key still held by another session (a previous
// incarnation of the same member, not yet expired) is taken over by
// destroying that session, as the embedded store moves the key to the new
// lease; that session's other keys go with it.
func (s *Store) PutEphemeral(ctx context.Context, l rendezvous.Lease, key string, data []byte) error {
	ml, err := s.ownLease(l, key)
	if err != nil {
		return err
	}
	return s.takingOver(ctx, key, func() (held *refusal, err error) {
		err = s.again(ctx, func() (err error) {
			held, err = s.acquire(ctx, ml.id, key, data)
			return err
		})
		return held, err
	})
}

// ownLease returns l as a lease this store granted.
func (s *Store) ownLease(l rendezvous.Lease, key string) (*lease, error) {
	ml, ok := l.(*lease)
	if !ok || ml.s != s {
		return nil, fmt.Errorf("put ephemeral %s: lease %s was not granted by this store", key, l.ID())
	}
	return ml, nil
}

// takingOver runs try, which locks key, until the lock is not refused: a
// session that holds the key is destroyed, and a lock delay waited out,
// between tries.
func (s *Store) takingOver(ctx context.Context, key string, try func() (*refusal, error)) error {
	for attempt := 0; ; attempt++ {
		held, err := try()
		if err != nil || held == nil {
			return err
		}
		if attempt == 2 {
			return fmt.Errorf("put ephemeral %s: %w (%s)", key, ErrKeyHeld, held)
		}
		if held.session != "" {
			s.cfg.Logger.Warn("taking over ephemeral key from another session", "key", key, "session", held.session)
			if err := s.destroy(ctx, held.session); err != nil {
				return err
			}
		}
		// The lock delay of the session that held the key (ours: 1 ms; a
		// foreign one may be longer, and then the last attempt fails).
		if err := sleepCtx(ctx, s.cfg.LockDelay+5*time.Millisecond); err != nil {
			return err
		}
	}
}

// refusal says why an acquire was refused: another session holds the key,
// or (session "") the key is under a dead session's lock delay.
type refusal struct{ session string }

func (r *refusal) String() string {
	if r.session == "" {
		return "under lock delay"
	}
	return "session " + r.session
}

// isInvalidSession tells Consul's answer to a lock with an unknown session.
func isInvalidSession(what string) bool {
	return strings.Contains(strings.ToLower(what), "invalid session")
}

// acquire tries to take key for session id. It returns nil once the key is
// ours, or why it is not.
func (s *Store) acquire(ctx context.Context, id, key string, data []byte) (*refusal, error) {
	cctx, cancel, err := s.call(ctx, s.cfg.RequestTimeout)
	if err != nil {
		return nil, err
	}
	defer cancel()
	ok, _, err := s.kv.Acquire(&capi.KVPair{Key: s.full(key), Value: data, Session: id}, (&capi.WriteOptions{}).WithContext(cctx))
	switch {
	case err != nil && isInvalidSession(err.Error()):
		return nil, fmt.Errorf("put ephemeral %s: %w", key, rendezvous.ErrLeaseNotFound)
	case err != nil:
		return nil, s.fail(ctx, "acquire "+key, err)
	case ok:
		return nil, nil
	}
	return s.refused(ctx, id, key)
}

// refused says why a lock of key by session id was refused: held by
// another session, under lock delay, or (ErrLeaseNotFound) our session
// went away.
func (s *Store) refused(ctx context.Context, id, key string) (*refusal, error) {
	cctx, cancel, err := s.call(ctx, s.cfg.RequestTimeout)
	if err != nil {
		return nil, err
	}
	defer cancel()
	p, _, err := s.kv.Get(s.full(key), (&capi.QueryOptions{}).WithContext(cctx))
	if err != nil {
		return nil, s.fail(ctx, "get "+key, err)
	}
	if p != nil && p.Session != "" && p.Session != id {
		return &refusal{session: p.Session}, nil
	}
	info, _, err := s.client.Session().Info(id, (&capi.QueryOptions{}).WithContext(cctx))
	if err != nil {
		return nil, s.fail(ctx, "session info", err)
	}
	if info == nil {
		return nil, fmt.Errorf("put ephemeral %s: %w", key, rendezvous.ErrLeaseNotFound)
	}
	return &refusal{}, nil
}

func (s *Store) destroy(ctx context.Context, id string) error {
	cctx, cancel, err := s.call(ctx, s.cfg.RequestTimeout)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.client.Session().Destroy(id, (&capi.WriteOptions{}).WithContext(cctx)); err != nil {
		return s.fail(ctx, "destroy session "+id, err)
	}
	return nil
}
