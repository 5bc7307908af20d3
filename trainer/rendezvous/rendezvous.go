package rendezvous

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults of Options.
const (
	DefaultTimeout  = 5 * time.Minute
	DefaultLeaseTTL = 10 * time.Second // Consul's smallest session TTL
)

// ErrTimeout is matched (errors.Is) by the *TimeoutError Join returns when
// the gang is not complete in time.
var ErrTimeout = errors.New("rendezvous timed out")

// TimeoutError says how far the gang got before Join gave up.
type TimeoutError struct {
	Run        string
	Generation uint64 // the generation being joined (0: none yet)
	Joined     int    // members signed in to it
	WorldSize  int
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("rendezvous %s timed out: %d of %d members joined generation %d",
		e.Run, e.Joined, e.WorldSize, e.Generation)
}

// Is makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// Options tune Join. The zero value is usable.
type Options struct {
	// Timeout bounds the whole join (default DefaultTimeout).
	Timeout time.Duration
	// LeaseTTL is the TTL of the lease holding the member's alive key
	// (default DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Logger (default: none).
	Logger hclog.Logger
	// Clock times the join's Timeout (default: wall clock). Lease renewals
	// run on the store's own clock.
	Clock Clock
}

// Session is a member's membership of one complete generation. Its lease
// keeps the member's alive key "<run>/gen/<g>/alive/<id>" until Leave.
type Session struct {
	st       Store
	run      string
	me       Participant
	assign   Assignment
	lease    Lease
	logger   hclog.Logger
	kaCancel context.CancelFunc
	kaDone   chan struct{} // closed when the keep-alive loop ends
	kaErr    error         // why it ended; written before kaDone closes

	leaveOnce sync.Once
	leaveErr  error
}

func stateKey(run string) string { return run + "/state" }

func alivePrefix(run string, gen uint64) string { return fmt.Sprintf("%s/gen/%d/alive/", run, gen) }

func aliveKey(run string, gen uint64, id string) string { return alivePrefix(run, gen) + id }

func checkNames(run string, me Member) error {
	switch {
	case run == "" || strings.HasPrefix(run, "/") || strings.HasSuffix(run, "/"):
		return fmt.Errorf("run name %q: must be non-empty without a leading or trailing slash", run)
	case me.ID == "" || strings.Contains(me.ID, "/"):
		return fmt.Errorf("member ID %q: must be non-empty without a slash", me.ID)
	}
	return nil
}

// Join signs me in to the run's gang of worldSize members and returns once
// the generation is complete, with my assignment. A member that joins a
// complete generation it is not part of opens the next generation, which
// the old members observe through WatchLoss and rejoin.
func Join(ctx context.Context, st Store, run string, me Member, worldSize int, opts Options) (*Session, error) {
	if err := checkNames(run, me); err != nil {
		return nil, fmt.Errorf("join rendezvous: %w", err)
	}
	if worldSize < 1 {
		return nil, fmt.Errorf("join rendezvous: world size %d must be at least 1", worldSize)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	clock := orRealClock(opts.Clock)
	start := clock.Now()
	logger := opts.Logger.Named("rendezvous").With("run", run, "member", me.ID)

	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut atomic.Bool
	timer := clock.AfterFunc(opts.Timeout, func() {
		timedOut.Store(true)
		cancel()
	})
	defer timer.Stop()

	// The first read and the lease grant do not depend on each other.
	type read struct {
		v   Value
		err error
	}
	first := make(chan read, 1)
	go func() {
		v, err := st.Get(jctx, stateKey(run))
		first <- read{v, err}
	}()
	lease, err := st.Grant(jctx, opts.LeaseTTL)
	r := <-first
	if err == nil && r.err != nil {
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = lease.Revoke(rctx) // best effort; the TTL ends it otherwise
		rcancel()
		err = r.err
	}
	if err != nil {
		if timedOut.Load() {
			return nil, &TimeoutError{Run: run, WorldSize: worldSize}
		}
		return nil, fmt.Errorf("join rendezvous: %w", err)
	}
	kaCtx, kaCancel := context.WithCancel(context.Background())
	s := &Session{
		st:       st,
		run:      run,
		me:       Participant{Member: me, Incarnation: newID()},
		lease:    lease,
		logger:   logger,
		kaCancel: kaCancel,
		kaDone:   make(chan struct{}),
	}
	go func() {
		s.kaErr = lease.KeepAlive(kaCtx)
		close(s.kaDone)
	}()

	last, err := s.joinLoop(jctx, worldSize, r.v)
	if err == nil {
		logger.Info("rendezvous complete", "generation", s.assign.Generation, "rank", s.assign.Rank,
			"world_size", s.assign.WorldSize, "took", clock.Now().Sub(start))
		return s, nil
	}
	s.abandon(last)
	if timedOut.Load() && ctx.Err() == nil {
		te := &TimeoutError{Run: run, WorldSize: worldSize}
		if last != nil && last.Phase == PhaseJoining {
			te.Generation, te.Joined = last.Generation, len(last.Members)
		}
		return nil, te
	}
	return nil, fmt.Errorf("join rendezvous %s: %w", run, err)
}

// joinLoop is the join loop: read, decide, write or wait, until done. It
// returns the last state it saw, for error reports and withdrawal.
func (s *Session) joinLoop(ctx context.Context, worldSize int, v Value) (*State, error) {
	key := stateKey(s.run)
	var aliveGen uint64 // generation whose alive key we hold
	for {
		cur, err := decodeState(v)
		if err != nil {
			return nil, err
		}
		d, err := Decide(cur, s.me, worldSize)
		if err != nil {
			return cur, err
		}
		switch d.Action {
		case ActionDone:
			peers, err := cur.Peers()
			if err != nil {
				return cur, err
			}
			s.assign, err = NewAssignment(cur.Generation, peers, s.me.ID)
			return cur, err
		case ActionWait:
			if v, err = s.st.Wait(ctx, key, v.Version); err != nil {
				return cur, err
			}
		case ActionWrite:
			// The alive key goes first, so a member in the state whose key
			// is missing is known to be gone.
			if g := d.Next.Generation; g != aliveGen {
				me, _ := json.Marshal(s.me.Member)
				if err := s.st.PutEphemeral(ctx, s.lease, aliveKey(s.run, g, s.me.ID), me); err != nil {
					return cur, err
				}
				aliveGen = g
			}
			data, err := json.Marshal(d.Next)
			if err != nil {
				return cur, fmt.Errorf("encode state: %w", err)
			}
			// Won or lost, v is now the current state: decide again on it.
			var ok bool
			if v, ok, err = s.st.CompareAndSet(ctx, key, data, v.Version); err != nil {
				return cur, err
			}
			if ok {
				s.logger.Debug("wrote state", "generation", d.Next.Generation, "phase", d.Next.Phase,
					"members", len(d.Next.Members))
			}
		}
	}
}

// abandon undoes a failed join: withdraw from the joining generation (best
// effort, briefly), end the lease.
func (s *Session) abandon(last *State) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := stateKey(s.run)
	for range 3 {
		v, err := s.st.Get(ctx, key)
		if err != nil {
			break
		}
		cur, err := decodeState(v)
		if err != nil {
			break
		}
		next, ok := Withdraw(cur, s.me)
		if !ok {
			break
		}
		data, err := json.Marshal(next)
		if err != nil {
			break
		}
		if _, ok, err := s.st.CompareAndSet(ctx, key, data, v.Version); err != nil || ok {
			break
		}
	}
	_ = s.Leave(ctx)
}

// Assignment is this member's place in the generation.
func (s *Session) Assignment() Assignment { return s.assign }

// Leave ends the membership: stops the keep-alive and revokes the lease, so
// the member's alive key vanishes and the others' WatchLoss fires.
func (s *Session) Leave(ctx context.Context) error {
	s.leaveOnce.Do(func() {
		s.kaCancel()
		<-s.kaDone
		if err := s.lease.Revoke(ctx); err != nil && !errors.Is(err, ErrLeaseNotFound) {
			s.leaveErr = fmt.Errorf("leave rendezvous: %w", err)
		}
	})
	return s.leaveErr
}

// LossReason says why a LostEvent fired.
type LossReason string

// Reasons of a LostEvent.
const (
	// ReasonMemberLost: a member's alive key vanished (lease revoked or
	// expired, connection closed).
	ReasonMemberLost LossReason = "member_lost"
	// ReasonGenerationChanged: another member opened a newer generation.
	ReasonGenerationChanged LossReason = "generation_changed"
	// ReasonLeaseLost: this member's own lease could not be renewed.
	ReasonLeaseLost LossReason = "lease_lost"
	// ReasonStoreError: the store failed (e.g. its server went away).
	ReasonStoreError LossReason = "store_error"
)

// LostEvent reports that the generation can no longer be trusted to be
// whole; the member should stop its collectives and Join again.
type LostEvent struct {
	Generation    uint64 // the session's generation
	Reason        LossReason
	Member        string   // a lost member's ID, the first by rank (ReasonMemberLost)
	Missing       []string // every member whose alive key is gone, by rank (ReasonMemberLost)
	NewGeneration uint64   // the state's generation (ReasonGenerationChanged)
	Err           error    // the cause (ReasonLeaseLost, ReasonStoreError)
}

func (e LostEvent) String() string {
	switch e.Reason {
	case ReasonMemberLost:
		return fmt.Sprintf("generation %d: member %s lost", e.Generation, e.Member)
	case ReasonGenerationChanged:
		return fmt.Sprintf("generation %d: moved on to generation %d", e.Generation, e.NewGeneration)
	}
	return fmt.Sprintf("generation %d: %s: %v", e.Generation, e.Reason, e.Err)
}

// WatchLoss watches the generation and sends one LostEvent when a member's
// alive key vanishes, the generation moves on, the own lease is lost or the
// store fails; then it closes the channel. It closes the channel without an
// event when ctx is done.
func (s *Session) WatchLoss(ctx context.Context) <-chan LostEvent {
	ch := make(chan LostEvent, 1)
	go func() {
		defer close(ch)
		if ev, ok := s.watch(ctx); ok {
			ch <- ev
		}
	}()
	return ch
}

func (s *Session) watch(ctx context.Context) (LostEvent, bool) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.kaDone:
			cancel()
		case <-wctx.Done():
		}
	}()
	gen := s.assign.Generation
	var idx uint64
	for {
		kvs, next, err := s.st.WaitPrefix(wctx, s.run+"/", idx)
		if err != nil {
			select {
			case <-s.kaDone:
				if ctx.Err() == nil {
					return LostEvent{Generation: gen, Reason: ReasonLeaseLost, Err: s.kaErr}, s.kaErr != nil
				}
			default:
			}
			if ctx.Err() != nil {
				return LostEvent{}, false
			}
			return LostEvent{Generation: gen, Reason: ReasonStoreError, Err: err}, true
		}
		idx = next
		if ev, lost := CheckLoss(s.run, s.assign, kvs); lost {
			s.logger.Debug("generation lost", "generation", gen, "reason", ev.Reason, "lost", ev.Member,
				"new_generation", ev.NewGeneration)
			return ev, true
		}
	}
}

// CheckLoss looks at the keys under "<run>/" and reports whether the
// generation of a is no longer whole: the state names another generation,
// or a peer's alive key is missing.
func CheckLoss(run string, a Assignment, kvs []KeyValue) (LostEvent, bool) {
	ev := LostEvent{Generation: a.Generation}
	present := make(map[string]bool)
	prefix := alivePrefix(run, a.Generation)
	stateSeen := false
	for _, kv := range kvs {
		switch {
		case kv.Key == stateKey(run):
			stateSeen = true
			var st State
			if err := json.Unmarshal(kv.Data, &st); err != nil || st.Generation != a.Generation {
				ev.Reason, ev.NewGeneration = ReasonGenerationChanged, st.Generation
				return ev, true
			}
		case strings.HasPrefix(kv.Key, prefix):
			present[strings.TrimPrefix(kv.Key, prefix)] = true
		}
	}
	if !stateSeen {
		ev.Reason = ReasonGenerationChanged
		return ev, true
	}
	for _, p := range a.Peers {
		if !present[p.ID] {
			ev.Missing = append(ev.Missing, p.ID)
		}
	}
	if len(ev.Missing) == 0 {
		return LostEvent{}, false
	}
	ev.Reason, ev.Member = ReasonMemberLost, ev.Missing[0]
	return ev, true
}
