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
