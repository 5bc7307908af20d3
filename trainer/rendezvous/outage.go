package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Riding out a store outage. A complete generation needs its store only to
// learn of a lost member faster than its collectives would, and for the
// next rendezvous; training itself never waits on it. So when the store
// fails (an agent restarting, a leader election), or comes back having
// forgotten the run (a Consul dev or client agent restarted empty: no
// sessions, no keys, indexes low again), the watch does not report the
// generation lost. It keeps watching for up to Options.OutageGrace, and
// once the store answers it writes back what the generation keeps there:
// its lease (renewed if the store still knows it, else granted anew), the
// state document (only if absent, so a newer generation is never
// overwritten) and its alive key, and then whatever Options.Restore
// writes. Peers' alive keys missing meanwhile are not losses: each member
// puts its own back, and a peer that really died breaks the collectives,
// which notice without the store. Only an outage longer than the grace, or
// a peer still missing at its end, is reported.

// DefaultOutageGrace is Options.OutageGrace's default.
const DefaultOutageGrace = 2 * time.Minute

// restoreTimeout bounds one attempt to write the generation's keys back.
const restoreTimeout = 10 * time.Second

// outagePause spaces attempts while the store fails at once.
const outagePause = time.Second

// keeper is a lease and the loop that keeps it alive.
type keeper struct {
	lease  Lease
	cancel context.CancelFunc
	done   chan struct{} // closed when KeepAlive returned
	err    error         // what KeepAlive returned; written before done closes
}

func keep(l Lease) *keeper {
	ctx, cancel := context.WithCancel(context.Background())
	k := &keeper{lease: l, cancel: cancel, done: make(chan struct{})}
	go func() {
		k.err = l.KeepAlive(ctx)
		close(k.done)
	}()
	return k
}

// stop ends the keep-alive loop and waits for it.
func (k *keeper) stop() {
	k.cancel()
	<-k.done
}

// ended reports whether the keep-alive loop has ended.
func (k *keeper) ended() bool {
	select {
	case <-k.done:
		return true
	default:
		return false
	}
}

func (s *Session) keeper() *keeper {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ka
}

// errLeft: the member left while a lease was being restored.
var errLeft = errors.New("left the rendezvous")

// outage is what the watch knows of a store in trouble.
type outage struct {
	since time.Time // zero while the store is healthy
}

func (o *outage) active() bool { return !o.since.IsZero() }

// watch is WatchLoss's loop.
func (s *Session) watch(ctx context.Context) (LostEvent, bool) {
	gen := s.assign.Generation
	var idx uint64
	var out outage
	known := s.stateVersion // of the state document, as last seen
	for {
		ka := s.keeper()
		kvs, next, err := s.waitPrefix(ctx, ka, idx, out)
		if ctx.Err() != nil {
			return LostEvent{}, false
		}
		restore := false
		var trouble error
		switch {
		case ka.ended():
			if ka.err == nil { // stopped by Leave
				return LostEvent{}, false
			}
			if errors.Is(ka.err, ErrClosed) || errors.Is(err, ErrClosed) {
				return LostEvent{Generation: gen, Reason: ReasonLeaseLost, Err: ka.err}, true
			}
			if trouble = s.leaseTrouble(ctx, ka, known, out); trouble == nil {
				// The store kept the run and let the lease expire: this
				// member was gone too long (frozen) for its peers.
				return LostEvent{Generation: gen, Reason: ReasonLeaseLost, Err: ka.err}, true
			}
			restore, idx = true, 0
		case errors.Is(err, ErrClosed):
			return LostEvent{Generation: gen, Reason: ReasonStoreError, Err: err}, true
		case err != nil:
			trouble, idx = err, 0
		default:
			backwards := idx > 0 && next < idx
			idx = next
			ev, lost := CheckLoss(s.run, s.assign, kvs)
			switch {
			case !lost:
				known = keyVersion(kvs, StateKey(s.run))
				if out.active() {
					s.logger.Info("rendezvous store back; the generation is whole", "generation", gen,
						"outage", time.Since(out.since).Round(time.Millisecond))
				}
				out = outage{}
				continue
			case ev.Reason == ReasonGenerationChanged && keyVersion(kvs, StateKey(s.run)) == 0:
				trouble, restore = errors.New("the store lost the run's state"), true
			case ev.Reason == ReasonMemberLost && slices.Contains(ev.Missing, s.me.ID):
				if !out.active() && !backwards && keyVersion(kvs, StateKey(s.run)) == known {
					return ev, true // the store is well: this member's lease expired
				}
				trouble, restore = errors.New("the store lost this member's alive key"), true
			case ev.Reason == ReasonMemberLost && (out.active() || backwards):
				trouble = fmt.Errorf("waiting for the store to get back %v", ev.Missing)
			default:
				return ev, true
			}
		}
		if !out.active() {
			out.since = time.Now()
			s.logger.Warn("rendezvous store in trouble; training goes on while the collectives are whole",
				"generation", gen, "grace", s.opts.OutageGrace, "cause", trouble)
		}
		if d := time.Since(out.since); d >= s.opts.OutageGrace {
			return LostEvent{Generation: gen, Reason: ReasonStoreError,
				Err: fmt.Errorf("the rendezvous store has been in trouble for %v, longer than the outage grace (%v): %w",
					d.Round(time.Second), s.opts.OutageGrace, trouble)}, true
		}
		if restore {
			if err := s.restore(ctx); errors.Is(err, errLeft) {
				return LostEvent{}, false
			} else if err != nil {
				s.logger.Debug("cannot restore the generation's keys yet", "error", err)
				if sleepCtx(ctx, outagePause) != nil {
					return LostEvent{}, false
				}
			}
			continue
		}
		if err != nil && sleepCtx(ctx, outagePause) != nil {
			return LostEvent{}, false
		}
	}
}

// waitPrefix waits for the run's keys to move on from idx, until the lease
// ka keeps ends, or, during an outage, until its grace ends.
func (s *Session) waitPrefix(ctx context.Context, ka *keeper, idx uint64, out outage) ([]KeyValue, uint64, error) {
	wctx, cancel := context.WithCancel(ctx)
	if out.active() {
		wctx, cancel = context.WithDeadline(ctx, out.since.Add(s.opts.OutageGrace))
	}
	defer cancel()
	go func() {
		select {
		case <-ka.done:
			cancel()
		case <-wctx.Done():
		}
	}()
	return s.st.WaitPrefix(wctx, s.run+"/", idx)
}

// leaseTrouble says why the lease of ka ended if that is a sign the store
// is in trouble (it failed, or forgot the run), and nil if the store is
// well and simply let the lease expire. known is the state document's
// version as last seen: a complete generation's document is never written
// again, so another version of it means the store lost it and a member
// put it back.
func (s *Session) leaseTrouble(ctx context.Context, ka *keeper, known uint64, out outage) error {
	if !errors.Is(ka.err, ErrLeaseNotFound) {
		return fmt.Errorf("lease lost: %w", ka.err) // renewals failed: the store is unreachable
	}
	if out.active() {
		return fmt.Errorf("lease lost: %w", ka.err)
	}
	lctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	kvs, _, err := s.st.List(lctx, s.run+"/")
	switch v := keyVersion(kvs, StateKey(s.run)); {
	case err != nil:
		return fmt.Errorf("lease lost: %w", err)
	case v == 0:
		return errors.New("the store lost the run's state and this member's lease")
	case v != known:
		return errors.New("the store lost this member's lease and the run's state was put back")
	}
	return nil
}

// keyVersion is the version of key in kvs, 0 when absent.
func keyVersion(kvs []KeyValue, key string) uint64 {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Version
		}
	}
	return 0
}

// restore writes the generation's keys back to a store that lost them: a
// live lease, the state document where none is, this member's alive key,
// and then what Options.Restore writes.
func (s *Session) restore(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	l, err := s.liveLease(rctx, false)
	if err != nil {
		return err
	}
	if _, _, err := s.st.CompareAndSet(rctx, StateKey(s.run), s.state, 0); err != nil {
		return fmt.Errorf("restore the state: %w", err)
	}
	key := aliveKey(s.run, s.assign.Generation, s.me.ID)
	err = s.st.PutEphemeral(rctx, l, key, s.record)
	if errors.Is(err, ErrLeaseNotFound) { // the store forgot a lease we still renewed
		if l, err = s.liveLease(rctx, true); err == nil {
			err = s.st.PutEphemeral(rctx, l, key, s.record)
		}
	}
	if err != nil {
		return fmt.Errorf("restore the alive key: %w", err)
	}
	if s.opts.Restore != nil {
		if err := s.opts.Restore(rctx); err != nil {
			return fmt.Errorf("restore the caller's keys: %w", err)
		}
	}
	s.logger.Info("wrote the generation's keys back to the rendezvous store", "generation", s.assign.Generation)
	return nil
}

// liveLease returns a lease the store knows and that is kept alive: the
// current one while its keep-alive runs (unless fresh), the same one again
// if the store still renews it, or a new one.
func (s *Session) liveLease(ctx context.Context, fresh bool) (Lease, error) {
	ka := s.keeper()
	if !fresh && !ka.ended() {
		return ka.lease, nil
	}
	ka.stop()
	l := ka.lease
	err := ErrLeaseNotFound
	if !fresh && !errors.Is(ka.err, ErrLeaseNotFound) {
		err = l.Renew(ctx)
	}
	switch {
	case errors.Is(err, ErrLeaseNotFound):
		if l, err = s.st.Grant(ctx, s.opts.LeaseTTL); err != nil {
			return nil, fmt.Errorf("grant a new lease: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("renew the lease: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left {
		if l != ka.lease {
			_ = l.Revoke(ctx)
		}
		return nil, errLeft
	}
	s.ka = keep(l)
	return l, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
