package rendezvous

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	// DefaultSettle is how long an elastic gang waits for more members
	// once it has its minimum (Options.Settle).
	DefaultSettle = 3 * time.Second
)

// ErrTimeout is matched (errors.Is) by the *TimeoutError Join returns when
// the gang is not complete in time.
var ErrTimeout = errors.New("rendezvous timed out")

// ErrGangFinished is returned by Join to a member that waits to join an
// elastic gang which has meanwhile finished its work (every member of the
// generation it would have joined is done): there is nothing left to join.
var ErrGangFinished = errors.New("the gang finished without this member")

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
	// OutageGrace is how long a complete generation rides out a store that
	// fails or forgot the run (an agent restarted empty) before WatchLoss
	// reports it (default DefaultOutageGrace; see outage.go).
	OutageGrace time.Duration
	// Settle is how long a joining elastic gang that has its minimum
	// waits for more members before it completes with those it has
	// (default DefaultSettle). A gang of a fixed size ignores it.
	Settle time.Duration
	// Lost names the members of the last generation this member saw lost
	// (LostEvent.Missing). An elastic gang whose members are all either
	// signed in or seen lost completes without the settle time.
	Lost []string
	// Restore, when set, is called after the generation's own keys were
	// written back to a store that had lost them, to write back what else
	// the caller keeps there. Its error is retried like the store's.
	Restore func(ctx context.Context) error
}

// Session is a member's membership of one complete generation. Its lease
// keeps the member's alive key "<run>/gen/<g>/alive/<id>" until Leave.
type Session struct {
	st     Store
	run    string
	me     Participant
	assign Assignment
	logger hclog.Logger
	opts   Options // with defaults applied
	// state is the complete generation's state document and record this
	// member's join record, as written: what a store that lost them gets
	// back (see restore).
	state, record []byte
	stateVersion  uint64 // the version of state as the join read it
	clock         Clock
	// Owned by the join loop: the generation whose listing first showed
	// an elastic gang's minimum, and when (see settled).
	minGen   uint64
	minSince time.Time

	mu sync.Mutex
	// guarded by mu:
	ka   *keeper // the lease and its keep-alive loop
	left bool    // Leave began: no new lease

	leaveOnce sync.Once
	leaveErr  error
}

func checkNames(run string, me Member) error {
	switch {
	case run == "" || strings.HasPrefix(run, "/") || strings.HasSuffix(run, "/"):
		return fmt.Errorf("run name %q: must be non-empty without a leading or trailing slash", run)
	case me.ID == "" || strings.Contains(me.ID, "/"):
		return fmt.Errorf("member ID %q: must be non-empty without a slash", me.ID)
	}
	return nil
}

// Join signs me in to the run's gang of size members and returns once the
// generation is complete, with my assignment (Fixed(n) for a gang of
// exactly n). A member that joins a complete generation it is not part of
// opens the next generation, which the old members observe through
// WatchLoss and rejoin.
func Join(ctx context.Context, st Store, run string, me Member, size Size, opts Options) (*Session, error) {
	if err := checkNames(run, me); err != nil {
		return nil, fmt.Errorf("join rendezvous: %w", err)
	}
	if err := size.Check(); err != nil {
		return nil, fmt.Errorf("join rendezvous: %w", err)
	}
	worldSize := size.Max
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
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
	if opts.OutageGrace <= 0 {
		opts.OutageGrace = DefaultOutageGrace
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

	// No read comes first: the first sign-in assumes generation 1 is
	// joining (no state yet), and when it is not, the failed check answers
	// with the state.
	lease, err := st.Grant(jctx, opts.LeaseTTL)
	if err != nil {
		if timedOut.Load() {
			return nil, &TimeoutError{Run: run, WorldSize: worldSize}
		}
		return nil, fmt.Errorf("join rendezvous: %w", err)
	}
	s := &Session{
		st:     st,
		run:    run,
		me:     Participant{Member: me, Incarnation: newID()},
		logger: logger,
		opts:   opts,
		ka:     keep(lease),
		clock:  clock,
	}

	last, err := s.joinLoop(jctx, size)
	if err == nil {
		logger.Info("rendezvous complete", "generation", s.assign.Generation, "rank", s.assign.Rank,
			"world_size", s.assign.WorldSize, "took", clock.Now().Sub(start))
		return s, nil
	}
	s.abandon()
	if timedOut.Load() && ctx.Err() == nil {
		te := &TimeoutError{Run: run, WorldSize: worldSize}
		te.Generation, te.Joined = last.joined()
		return nil, te
	}
	return nil, fmt.Errorf("join rendezvous %s: %w", run, err)
}

// foldAfter is how long a join waits before the member that folds records
// the members signed in so far in the state document (Fold), and then how
// often it looks again while the gang stays incomplete.
const foldAfter = 250 * time.Millisecond

// joinLoop is the join loop: decide, then write, sign in or wait, until
// done. It returns the last view, for error reports and withdrawal.
func (s *Session) joinLoop(ctx context.Context, size Size) (View, error) {
	key := StateKey(s.run)
	var view View
	var version uint64 // of view.State
	see := func(v Value) error {
		st, err := decodeState(v)
		if err != nil {
			return err
		}
		view.State, version = st, v.Version
		return nil
	}
	for {
		d, err := Decide(view, s.me, size)
		if err != nil {
			return view, err
		}
		switch d.Action {
		case ActionDone:
			peers, err := view.State.Peers()
			if err != nil {
				return view, err
			}
			s.stateVersion = version
			if s.state, err = json.Marshal(view.State); err != nil {
				return view, fmt.Errorf("encode state: %w", err)
			}
			s.assign, err = NewAssignment(view.State.Generation, peers, s.me.ID)
			return view, err
		case ActionJoin:
			r, err := s.signIn(ctx, d, version, size)
			if err != nil {
				return view, err
			}
			if !r.OK {
				if r.Failed != 0 { // only the state check can fail
					return view, fmt.Errorf("sign in: transaction failed at op %d", r.Failed)
				}
				if err := see(r.Current); err != nil {
					return view, err
				}
				continue
			}
			if d.Open {
				next := d.Next
				view.State, version = &next, r.Version
			}
			view.Signed, view.Listed = d.Generation, d.Generation
			if view.Joiners, err = decodeJoiners(r.List); err != nil {
				return view, err
			}
		case ActionWrite:
			data, err := json.Marshal(d.Next)
			if err != nil {
				return view, fmt.Errorf("encode state: %w", err)
			}
			// Won or lost, the answer is the current state: decide again.
			cur, ok, err := s.st.CompareAndSet(ctx, key, data, version)
			if err != nil {
				return view, err
			}
			if ok {
				s.logger.Debug("wrote state", "generation", d.Next.Generation, "phase", d.Next.Phase,
					"members", len(d.Next.Members))
			}
			if err := see(cur); err != nil {
				return view, err
			}
		case ActionWait:
			cur, err := s.wait(ctx, &view, version, size)
			if err != nil {
				return view, err
			}
			if err := see(cur); err != nil {
				return view, err
			}
		}
	}
}

// signIn runs d's transaction: check (or, opening a generation, set) the
// state read at version, write my join record, list the generation's.
func (s *Session) signIn(ctx context.Context, d Decision, version uint64, size Size) (TxnResult, error) {
	j := Joiner{Participant: s.me, WorldSize: size.Max}
	if size.Elastic() {
		j.MinSize, j.Lost = size.Min, s.opts.Lost
	}
	rec, err := json.Marshal(j)
	if err != nil {
		return TxnResult{}, fmt.Errorf("encode join record: %w", err)
	}
	s.record = rec
	guard := TxnOp{Kind: TxnCheck, Key: StateKey(s.run), Version: version}
	if d.Open {
		guard.Kind = TxnCAS
		if guard.Data, err = json.Marshal(d.Next); err != nil {
			return TxnResult{}, fmt.Errorf("encode state: %w", err)
		}
	}
	return s.st.Txn(ctx, []TxnOp{
		guard,
		{Kind: TxnPutEphemeral, Key: aliveKey(s.run, d.Generation, s.me.ID), Data: rec, Lease: s.keeper().lease},
		{Kind: TxnList, Key: alivePrefix(s.run, d.Generation)},
	})
}

// wait waits for the state to move on from version. The member that folds
// (View.Folder) wakes every foldAfter meanwhile, lists the join records and
// records them in the state (Fold); a listing that shows the gang whole
// ends the wait too, so the gang completes even if the member that saw it
// whole first died before writing it. In an elastic gang every member
// wakes so, and times how long the listing has shown the minimum: after
// the settle time the gang completes with those it has (View.Settled).
func (s *Session) wait(ctx context.Context, view *View, version uint64, size Size) (Value, error) {
	key := StateKey(s.run)
	for {
		if !view.Folder(s.me) && !size.Elastic() {
			return s.st.Wait(ctx, key, version)
		}
		wctx, cancel := context.WithTimeout(ctx, foldAfter)
		cur, err := s.st.Wait(wctx, key, version)
		expired := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil || !expired {
			return cur, err
		}
		g := view.joining()
		if size.Elastic() && view.State != nil && len(view.State.Prev) > 0 {
			if done, err := s.prevFinished(ctx, g-1, view.State.Prev); err != nil || done {
				return Value{}, cmp.Or(err, ErrGangFinished)
			}
		}
		kvs, _, err := s.st.List(ctx, alivePrefix(s.run, g))
		if err != nil {
			return Value{}, err
		}
		if view.Joiners, err = decodeJoiners(kvs); err != nil {
			return Value{}, err
		}
		view.Listed = g
		view.Settled = s.settled(g, len(view.Eligible()) >= size.Min)
		if d, err := Decide(*view, s.me, size); err != nil || d.Action != ActionWait {
			return s.st.Get(ctx, key) // decide again on a fresh read
		}
		next, ok := Fold(*view, s.me)
		if !ok {
			continue
		}
		data, err := json.Marshal(next)
		if err != nil {
			return Value{}, fmt.Errorf("encode state: %w", err)
		}
		if cur, _, err = s.st.CompareAndSet(ctx, key, data, version); err != nil {
			return Value{}, err
		}
		s.logger.Debug("recorded the members signed in so far", "generation", g, "members", len(next.Members))
		return cur, nil
	}
}

// prevFinished reports whether every member of generation gen, named by
// prev, has finished it (Finish).
func (s *Session) prevFinished(ctx context.Context, gen uint64, prev []string) (bool, error) {
	kvs, _, err := s.st.List(ctx, donePrefix(s.run, gen))
	if err != nil {
		return false, err
	}
	done := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		done[strings.TrimPrefix(kv.Key, donePrefix(s.run, gen))] = true
	}
	for _, id := range prev {
		if !done[id] {
			return false, nil
		}
	}
	return true, nil
}

// settled reports whether the listings of joining generation g have shown
// the gang's minimum (atMin now) for the settle time without a break.
func (s *Session) settled(g uint64, atMin bool) bool {
	now := s.clock.Now()
	if !atMin {
		s.minGen = 0
		return false
	}
	if s.minGen != g {
		s.minGen, s.minSince = g, now
	}
	return now.Sub(s.minSince) >= s.opts.Settle
}

// decodeJoiners reads listed join records, in join order (the order of
// their versions).
func decodeJoiners(kvs []KeyValue) ([]Joiner, error) {
	sorted := slices.Clone(kvs)
	slices.SortStableFunc(sorted, func(a, b KeyValue) int { return cmp.Compare(a.Version, b.Version) })
	out := make([]Joiner, 0, len(sorted))
	for _, kv := range sorted {
		var j Joiner
		if err := json.Unmarshal(kv.Data, &j); err != nil {
			return nil, fmt.Errorf("%w: join record %s: %v", ErrBadState, kv.Key, err)
		}
		out = append(out, j)
	}
	return out, nil
}

// abandon undoes a failed join: withdraw from the joining generation's
// member list where it was recorded (best effort, briefly), and end the
// lease, which removes the join record.
func (s *Session) abandon() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := StateKey(s.run)
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
		s.mu.Lock()
		s.left = true
		ka := s.ka
		s.mu.Unlock()
		ka.stop()
		if err := ka.lease.Revoke(ctx); err != nil && !errors.Is(err, ErrLeaseNotFound) {
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
// alive key vanishes, the generation moves on, the own lease expires or the
// store is closed; then it closes the channel. A store that fails, or comes
// back without the run's keys, is ridden out for Options.OutageGrace (see
// outage.go) before it is reported. It closes the channel without an event
// when ctx is done.
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
		case kv.Key == StateKey(run):
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
