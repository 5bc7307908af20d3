package consulstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// Defaults of Config.
const (
	DefaultPrefix         = "nomad-train/"
	DefaultWaitTime       = time.Minute
	DefaultRequestTimeout = 10 * time.Second
	// DefaultLockDelay is near zero on purpose: Consul's own default (used
	// when the field is 0, which the client omits) is 15 s, during which a
	// restarted member could not take its key back.
	DefaultLockDelay = time.Millisecond
	// DefaultMinTTL is Consul's session_ttl_min.
	DefaultMinTTL = 10 * time.Second
	// DefaultRetryPause is the least time between two blocking queries that
	// came back with nothing changed.
	DefaultRetryPause = 100 * time.Millisecond
	// DefaultErrorGrace is how long a blocking wait rides out failing
	// queries (an agent restarting, a leader election) before it gives up.
	DefaultErrorGrace = 15 * time.Second
	// DefaultSessionName names the sessions the store creates.
	DefaultSessionName = "nomad-train-rendezvous"
)

// ErrKeyHeld is returned by PutEphemeral when another live session still
// holds the key after the store tried to take it over.
var ErrKeyHeld = errors.New("key held by another session")

// ErrNoLeader is returned by Ping when the agent knows no cluster leader.
var ErrNoLeader = errors.New("consul cluster has no leader")

// Config configures a Store. The zero value talks to the agent that
// CONSUL_HTTP_ADDR names (default 127.0.0.1:8500) with the ACL token in
// CONSUL_HTTP_TOKEN, as capi.DefaultConfig reads them.
type Config struct {
	// Client is the Consul client to use; nil builds one from
	// capi.DefaultConfig with Address applied.
	Client *capi.Client
	// Address overrides CONSUL_HTTP_ADDR ("host:port" or a URL) when
	// Client is nil.
	Address string
	// Prefix is put before every key (default DefaultPrefix); it should end
	// with a slash.
	Prefix string
	// WaitTime bounds one blocking query (default DefaultWaitTime); a wait
	// longer than that is several queries. It also bounds how long an index
	// reset goes unnoticed.
	WaitTime time.Duration
	// RequestTimeout bounds every call that does not block (default
	// DefaultRequestTimeout).
	RequestTimeout time.Duration
	// LockDelay of the sessions (default DefaultLockDelay).
	LockDelay time.Duration
	// MinTTL is the server's session_ttl_min (default DefaultMinTTL); Grant
	// raises shorter TTLs to it.
	MinTTL time.Duration
	// RetryPause rate-limits blocking queries that return unchanged
	// (default DefaultRetryPause).
	RetryPause time.Duration
	// ErrorGrace is how long Wait and WaitPrefix retry failing queries,
	// with backoff from RetryPause to 2s, before returning the error
	// (default DefaultErrorGrace). Without it a short agent outage would
	// look like a lost generation to every watcher.
	ErrorGrace time.Duration
	// SessionName names the sessions (default DefaultSessionName).
	SessionName string
	// Logger (default: none).
	Logger hclog.Logger
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.WaitTime <= 0 {
		c.WaitTime = DefaultWaitTime
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.LockDelay <= 0 {
		c.LockDelay = DefaultLockDelay
	}
	if c.MinTTL <= 0 {
		c.MinTTL = DefaultMinTTL
	}
	if c.RetryPause <= 0 {
		c.RetryPause = DefaultRetryPause
	}
	if c.ErrorGrace <= 0 {
		c.ErrorGrace = DefaultErrorGrace
	}
	if c.SessionName == "" {
		c.SessionName = DefaultSessionName
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Store is a rendezvous.Store on Consul KV and sessions. Versions are
// ModifyIndexes; CompareAndSet is a one-operation transaction with the verb
// "cas" (the ModifyIndex is the fencing token, and the transaction reports
// the new index, which a plain CAS does not); Wait and WaitPrefix are
// blocking queries; leases are TTL sessions without node checks, behaviour
// "delete" and a near-zero lock delay. Safe for concurrent use.
type Store struct {
	client *capi.Client
	kv     *capi.KV
	cfg    Config
	owned  *http.Transport // the transport of a client built here, or nil

	// base is cancelled by Close, so that pending calls fail.
	base   context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// guarded by mu:
	closed bool
	seen   map[string]seenKey // key -> what the last read of it said
	leases map[string]*lease  // live leases granted here, by session ID
}

// seenKey is the last observed version of a key and the blocking index that
// goes with it (the ModifyIndex when present, the KV table index when
// absent).
type seenKey struct {
	version, index uint64
}

// maxSeen bounds the seen cache; it only saves a round trip per Wait.
const maxSeen = 1024

// New returns a Store for cfg. It does not contact Consul.
func New(cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	client := cfg.Client
	var owned *http.Transport
	if client == nil {
		var err error
		if client, owned, err = NewClient(cfg.Address); err != nil {
			return nil, fmt.Errorf("new consul store: %w", err)
		}
	}
	base, cancel := context.WithCancel(context.Background())
	return &Store{
		client: client,
		kv:     client.KV(),
		cfg:    cfg,
		owned:  owned,
		base:   base,
		cancel: cancel,
		seen:   make(map[string]seenKey),
		leases: make(map[string]*lease),
	}, nil
}

// Ping asks the agent for the cluster's leader, to tell early that the
// agent is unreachable or has no leader.
func (s *Store) Ping(ctx context.Context) error {
	q, cancel, err := s.readOpts(ctx, 0, s.cfg.RequestTimeout)
	if err != nil {
		return err
	}
	defer cancel()
	leader, err := s.client.Status().LeaderWithQueryOptions(q)
	if err != nil {
		return s.fail(ctx, "ping", err)
	}
	if leader == "" {
		return fmt.Errorf("consul ping: %w", ErrNoLeader)
	}
	return nil
}

// Client returns the Consul client the store uses.
func (s *Store) Client() *capi.Client { return s.client }

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.cfg.Prefix }

// call derives the context of one request from ctx and the store's life,
// with timeout when it is positive.
func (s *Store) call(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, nil, rendezvous.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var cctx context.Context
	var cancel context.CancelFunc
	if timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, timeout)
	} else {
		cctx, cancel = context.WithCancel(ctx)
	}
	stop := context.AfterFunc(s.base, cancel)
	return cctx, func() { stop(); cancel() }, nil
}

// fail turns a request error into the error to return: ErrClosed once the
// store is closed, the caller's own context error, or err wrapped with what
// failed.
func (s *Store) fail(ctx context.Context, what string, err error) error {
	if s.base.Err() != nil {
		return rendezvous.ErrClosed
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("consul %s: %w", what, err)
}

func (s *Store) full(key string) string { return s.cfg.Prefix + key }

func (s *Store) remember(key string, version, index uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) >= maxSeen {
		clear(s.seen)
	}
	s.seen[key] = seenKey{version: version, index: index}
}

func valueOf(p *capi.KVPair) rendezvous.Value {
	if p == nil {
		return rendezvous.Value{}
	}
	return rendezvous.Value{Data: bytes.Clone(p.Value), Version: p.ModifyIndex}
}

// readOpts returns the options of a read that blocks while the index is
// index (0: a plain read), bound to a request context (see call).
//
// Every read is bounded, so that a connection the agent no longer answers
// on fails instead of hanging: a plain read by timeout (RequestTimeout when
// 0), a blocking one by what the server may hold it (WaitTime and up to
// WaitTime/16 of jitter) plus RequestTimeout.
func (s *Store) readOpts(ctx context.Context, index uint64, timeout time.Duration) (*capi.QueryOptions, context.CancelFunc, error) {
	q := &capi.QueryOptions{WaitIndex: index}
	switch {
	case index > 0:
		q.WaitTime = s.cfg.WaitTime
		timeout = s.cfg.WaitTime + s.cfg.WaitTime/16 + s.cfg.RequestTimeout
	case timeout <= 0:
		timeout = s.cfg.RequestTimeout
	}
	cctx, cancel, err := s.call(ctx, timeout)
	if err != nil {
		return nil, nil, err
	}
	return q.WithContext(cctx), cancel, nil
}

// Get implements rendezvous.Store.
func (s *Store) Get(ctx context.Context, key string) (rendezvous.Value, error) {
	var v rendezvous.Value
	err := s.again(ctx, func() (err error) {
		v, _, err = s.get(ctx, key, 0, s.cfg.RequestTimeout)
		return err
	})
	return v, err
}

// get reads key, blocking while its index is index (0: no blocking), and
// returns its value and the response's index.
func (s *Store) get(ctx context.Context, key string, index uint64, timeout time.Duration) (rendezvous.Value, uint64, error) {
	q, cancel, err := s.readOpts(ctx, index, timeout)
	if err != nil {
		return rendezvous.Value{}, 0, err
	}
	defer cancel()
	p, meta, err := s.kv.Get(s.full(key), q)
	if err != nil {
		return rendezvous.Value{}, 0, s.fail(ctx, "get "+key, err)
	}
	v := valueOf(p)
	s.remember(key, v.Version, meta.LastIndex)
	return v, meta.LastIndex, nil
}

// staleCAS is the text Consul gives a transaction whose cas lost.
const staleCAS = "index is stale"

// CompareAndSet implements rendezvous.Store with a one-operation
// transaction; a lost race costs one more read for the winning value.
func (s *Store) CompareAndSet(ctx context.Context, key string, data []byte, version uint64) (v rendezvous.Value, ok bool, err error) {
	err = s.again(ctx, func() (err error) {
		v, ok, err = s.compareAndSet(ctx, key, data, version)
		return err
	})
	return v, ok, err
}

func (s *Store) compareAndSet(ctx context.Context, key string, data []byte, version uint64) (rendezvous.Value, bool, error) {
	cctx, cancel, err := s.call(ctx, s.cfg.RequestTimeout)
	if err != nil {
		return rendezvous.Value{}, false, err
	}
	defer cancel()
	ops := capi.TxnOps{{KV: &capi.KVTxnOp{Verb: capi.KVCAS, Key: s.full(key), Value: data, Index: version}}}
	ok, resp, _, err := s.client.Txn().Txn(ops, (&capi.QueryOptions{}).WithContext(cctx))
	if err != nil {
		return rendezvous.Value{}, false, s.fail(ctx, "compare-and-set "+key, err)
	}
	if ok {
		if len(resp.Results) != 1 || resp.Results[0].KV == nil {
			return rendezvous.Value{}, false, fmt.Errorf("consul compare-and-set %s: transaction returned %d results", key, len(resp.Results))
		}
		idx := resp.Results[0].KV.ModifyIndex
		s.remember(key, idx, idx)
		return rendezvous.Value{Data: bytes.Clone(data), Version: idx}, true, nil
	}
	for _, e := range resp.Errors {
		if !strings.Contains(e.What, staleCAS) {
			return rendezvous.Value{}, false, fmt.Errorf("consul compare-and-set %s: %s", key, e.What)
		}
	}
	cur, err := s.Get(ctx, key)
	if err != nil {
		return rendezvous.Value{}, false, err
	}
	return cur, false, nil
}

// Delete implements rendezvous.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	cctx, cancel, err := s.call(ctx, s.cfg.RequestTimeout)
	if err != nil {
		return err
	}
	defer cancel()
	if _, err := s.kv.Delete(s.full(key), (&capi.WriteOptions{}).WithContext(cctx)); err != nil {
		return s.fail(ctx, "delete "+key, err)
	}
	return nil
}

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
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// List implements rendezvous.Store.
func (s *Store) List(ctx context.Context, prefix string) (kvs []rendezvous.KeyValue, index uint64, err error) {
	err = s.again(ctx, func() (err error) {
		kvs, index, err = s.list(ctx, prefix, 0, s.cfg.RequestTimeout)
		return err
	})
	return kvs, index, err
}

func (s *Store) list(ctx context.Context, prefix string, index uint64, timeout time.Duration) ([]rendezvous.KeyValue, uint64, error) {
	q, cancel, err := s.readOpts(ctx, index, timeout)
	if err != nil {
		return nil, 0, err
	}
	defer cancel()
	pairs, meta, err := s.kv.List(s.full(prefix), q)
	if err != nil {
		return nil, 0, s.fail(ctx, "list "+prefix, err)
	}
	out := make([]rendezvous.KeyValue, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, rendezvous.KeyValue{
			Key:     strings.TrimPrefix(p.Key, s.cfg.Prefix),
			Data:    bytes.Clone(p.Value),
			Version: p.ModifyIndex,
		})
	}
	return out, max(meta.LastIndex, 1), nil
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

// closeGrace bounds how long Close spends destroying its live sessions.
const closeGrace = 2 * time.Second

// Close fails every call, pending blocking queries included, and destroys
// the sessions granted here that are still live (best effort, briefly), so
// their keys vanish at once rather than after 2×TTL.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ids := make([]string, 0, len(s.leases))
	for id := range s.leases {
		ids = append(ids, id)
	}
	clear(s.leases)
	s.mu.Unlock()
	s.cancel()

	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	var errs []error
	for _, id := range ids {
		if _, err := s.client.Session().Destroy(id, (&capi.WriteOptions{}).WithContext(ctx)); err != nil {
			errs = append(errs, fmt.Errorf("destroy session %s: %w", id, err))
		}
	}
	if s.owned != nil {
		s.owned.CloseIdleConnections()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close consul store: %w", err)
	}
	return nil
}
