// Package rendezvoustest holds the conformance suites every rendezvous.Store
// must pass (the embedded store, its TCP client, and later Consul) and a fake
// clock to drive lease expiry deterministically.
package rendezvoustest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// Fixture is one store under test.
type Fixture struct {
	// Connect returns a fresh handle on the store under test, as a separate
	// process would hold (a new connection for a networked store). The
	// suite closes each handle it gets.
	Connect func(t *testing.T) rendezvous.Store
	// Advance makes d pass on the store's lease clock; nil means the store
	// runs on the wall clock and the suite waits in real time.
	Advance func(d time.Duration)
	// TTL is the lease TTL the suite asks for (default 1s); a store with a
	// minimum TTL, as Consul's 10s, sets it.
	TTL time.Duration
	// Expiry is how long after its TTL an unrenewed lease may still live
	// (default 0; Consul: TTL, since it arms its timers at 2×TTL).
	Expiry time.Duration
}

func (f Fixture) ttl() time.Duration {
	if f.TTL > 0 {
		return f.TTL
	}
	return time.Second
}

// pass lets d pass for the store's leases.
func (f Fixture) pass(d time.Duration) {
	if f.Advance != nil {
		f.Advance(d)
		return
	}
	time.Sleep(d)
}

// wallWait bounds a wait for something the store does on its own: long
// enough for a wall-clock store to expire a lease, short for a fake clock.
func (f Fixture) wallWait() time.Duration {
	if f.Advance != nil {
		return 5 * time.Second
	}
	return 2*f.ttl() + f.Expiry + 5*time.Second
}

func connect(t *testing.T, f Fixture) rendezvous.Store {
	t.Helper()
	st := f.Connect(t)
	t.Cleanup(func() { st.Close() })
	return st
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// keyspace gives each test its own prefix, so one store can serve them all.
func keyspace(t *testing.T) string {
	return fmt.Sprintf("conformance/%s/%d", t.Name(), time.Now().UnixNano())
}

// Handle wraps a store shared by several test handles so that each can be
// closed on its own: a closed handle refuses calls with ErrClosed and the
// shared store stays open.
func Handle(st rendezvous.Store) rendezvous.Store { return &handle{st: st} }

type handle struct {
	st     rendezvous.Store
	closed atomic.Bool
}

func (h *handle) open() (rendezvous.Store, error) {
	if h.closed.Load() {
		return nil, rendezvous.ErrClosed
	}
	return h.st, nil
}

func (h *handle) Get(ctx context.Context, key string) (rendezvous.Value, error) {
	st, err := h.open()
	if err != nil {
		return rendezvous.Value{}, err
	}
	return st.Get(ctx, key)
}

func (h *handle) CompareAndSet(ctx context.Context, key string, data []byte, version uint64) (rendezvous.Value, bool, error) {
	st, err := h.open()
	if err != nil {
		return rendezvous.Value{}, false, err
	}
	return st.CompareAndSet(ctx, key, data, version)
}

func (h *handle) Delete(ctx context.Context, key string) error {
	st, err := h.open()
	if err != nil {
		return err
	}
	return st.Delete(ctx, key)
}

func (h *handle) Wait(ctx context.Context, key string, after uint64) (rendezvous.Value, error) {
	st, err := h.open()
	if err != nil {
		return rendezvous.Value{}, err
	}
	return st.Wait(ctx, key, after)
}

func (h *handle) List(ctx context.Context, prefix string) ([]rendezvous.KeyValue, uint64, error) {
	st, err := h.open()
	if err != nil {
		return nil, 0, err
	}
	return st.List(ctx, prefix)
}

func (h *handle) WaitPrefix(ctx context.Context, prefix string, after uint64) ([]rendezvous.KeyValue, uint64, error) {
	st, err := h.open()
	if err != nil {
		return nil, 0, err
	}
	return st.WaitPrefix(ctx, prefix, after)
}

func (h *handle) Grant(ctx context.Context, ttl time.Duration) (rendezvous.Lease, error) {
	st, err := h.open()
	if err != nil {
		return nil, err
	}
	return st.Grant(ctx, ttl)
}

func (h *handle) PutEphemeral(ctx context.Context, lease rendezvous.Lease, key string, data []byte) error {
	st, err := h.open()
	if err != nil {
		return err
	}
	return st.PutEphemeral(ctx, lease, key, data)
}

func (h *handle) Txn(ctx context.Context, ops []rendezvous.TxnOp) (rendezvous.TxnResult, error) {
	st, err := h.open()
	if err != nil {
		return rendezvous.TxnResult{}, err
	}
	return st.Txn(ctx, ops)
}

func (h *handle) Close() error {
	h.closed.Store(true)
	return nil
}

// RunStoreConformance checks the rendezvous.Store contract against the
// store newFixture returns.
func RunStoreConformance(t *testing.T, newFixture func(t *testing.T) Fixture) {
	t.Run("get absent", func(t *testing.T) {
		st := connect(t, newFixture(t))
		v, err := st.Get(testCtx(t, 5*time.Second), keyspace(t)+"/nothing")
		must.NoError(t, err)
		must.Eq(t, 0, v.Version)
		must.Len(t, 0, v.Data)
	})

	t.Run("compare and set", func(t *testing.T) {
		st := connect(t, newFixture(t))
		ctx, key := testCtx(t, 5*time.Second), keyspace(t)+"/k"
		v1, ok, err := st.CompareAndSet(ctx, key, []byte("one"), 0)
		must.NoError(t, err)
		must.True(t, ok)
		must.Positive(t, v1.Version)
		must.Eq(t, "one", string(v1.Data))

		cur, ok, err := st.CompareAndSet(ctx, key, []byte("again"), 0)
		must.NoError(t, err)
		must.False(t, ok, must.Sprint("create-only CAS over an existing key"))
		must.Eq(t, v1, cur, must.Sprint("a failed CAS returns the current value"))

		v2, ok, err := st.CompareAndSet(ctx, key, []byte("two"), v1.Version)
		must.NoError(t, err)
		must.True(t, ok)
		must.Greater(t, v1.Version, v2.Version)

		cur, ok, err = st.CompareAndSet(ctx, key, []byte("stale"), v1.Version)
		must.NoError(t, err)
		must.False(t, ok, must.Sprint("CAS with a stale version"))
		must.Eq(t, v2, cur, must.Sprint("a failed CAS returns the current value"))

		got, err := st.Get(ctx, key)
		must.NoError(t, err)
		must.Eq(t, v2, got)

		must.NoError(t, st.Delete(ctx, key))
		cur, ok, err = st.CompareAndSet(ctx, key, []byte("gone"), v2.Version)
		must.NoError(t, err)
		must.False(t, ok)
		must.Eq(t, 0, cur.Version, must.Sprint("a failed CAS on a deleted key returns it absent"))
	})

	t.Run("delete", func(t *testing.T) {
		st := connect(t, newFixture(t))
		ctx, key := testCtx(t, 5*time.Second), keyspace(t)+"/k"
		must.NoError(t, st.Delete(ctx, key)) // absent: no error
		v1, ok, err := st.CompareAndSet(ctx, key, []byte("x"), 0)
		must.NoError(t, err)
		must.True(t, ok)
		must.NoError(t, st.Delete(ctx, key))
		got, err := st.Get(ctx, key)
		must.NoError(t, err)
		must.Eq(t, 0, got.Version)
		_, ok, err = st.CompareAndSet(ctx, key, []byte("y"), v1.Version)
		must.NoError(t, err)
		must.False(t, ok, must.Sprint("CAS on a deleted key with its old version"))
		_, ok, err = st.CompareAndSet(ctx, key, []byte("y"), 0)
		must.NoError(t, err)
		must.True(t, ok, must.Sprint("create after delete"))
	})

	t.Run("concurrent increments", func(t *testing.T) {
		f := newFixture(t)
		ctx, key := testCtx(t, 20*time.Second), keyspace(t)+"/counter"
		const workers, each = 4, 10
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			st := connect(t, f)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					if err := increment(ctx, st, key); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must.NoError(t, err)
		}
		got, err := connect(t, f).Get(ctx, key)
		must.NoError(t, err)
		must.Eq(t, fmt.Sprint(workers*each), string(got.Data))
	})

	t.Run("wait wakes on write, create and delete", func(t *testing.T) {
		f := newFixture(t)
		waiter, writer := connect(t, f), connect(t, f)
		ctx, key := testCtx(t, 10*time.Second), keyspace(t)+"/k"

		created := waitAsync(ctx, waiter, key, 0)
		v1, ok, err := writer.CompareAndSet(ctx, key, []byte("a"), 0)
		must.NoError(t, err)
		must.True(t, ok)
		got := <-created
		must.NoError(t, got.err)
		must.Eq(t, v1, got.v)

		updated := waitAsync(ctx, waiter, key, v1.Version)
		v2, ok, err := writer.CompareAndSet(ctx, key, []byte("b"), v1.Version)
		must.NoError(t, err)
		must.True(t, ok)
		got = <-updated
		must.NoError(t, got.err)
		must.Eq(t, v2, got.v)

		deleted := waitAsync(ctx, waiter, key, v2.Version)
		must.NoError(t, writer.Delete(ctx, key))
		got = <-deleted
		must.NoError(t, got.err)
		must.Eq(t, 0, got.v.Version)
	})

	t.Run("wait returns at once when already changed", func(t *testing.T) {
		st := connect(t, newFixture(t))
		ctx, key := testCtx(t, 5*time.Second), keyspace(t)+"/k"
		v1, _, err := st.CompareAndSet(ctx, key, []byte("a"), 0)
		must.NoError(t, err)
		got, err := st.Wait(ctx, key, v1.Version+1000)
		must.NoError(t, err)
		must.Eq(t, v1, got)
	})

	t.Run("wait honours its context", func(t *testing.T) {
		st := connect(t, newFixture(t))
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := st.Wait(ctx, keyspace(t)+"/never", 0)
		must.ErrorIs(t, err, context.DeadlineExceeded)
		must.Less(t, 3*time.Second, time.Since(start))
		// The handle still works after an abandoned wait.
		_, err = st.Get(testCtx(t, 5*time.Second), keyspace(t)+"/x")
		must.NoError(t, err)
	})

	t.Run("list and wait prefix", func(t *testing.T) {
		f := newFixture(t)
		st, writer := connect(t, f), connect(t, f)
		ctx, ks := testCtx(t, 10*time.Second), keyspace(t)
		for _, k := range []string{"a/2", "a/1", "ab/1", "b/1"} {
			_, ok, err := writer.CompareAndSet(ctx, ks+"/"+k, []byte(k), 0)
			must.NoError(t, err)
			must.True(t, ok)
		}
		kvs, idx, err := st.List(ctx, ks+"/a/")
		must.NoError(t, err)
		must.Eq(t, []string{ks + "/a/1", ks + "/a/2"}, keys(kvs))
		must.Eq(t, "a/1", string(kvs[0].Data))
		for _, kv := range kvs {
			must.GreaterEq(t, kv.Version, idx)
		}

		woken := waitPrefixAsync(ctx, st, ks+"/a/", idx, keys(kvs))
		_, _, err = writer.CompareAndSet(ctx, ks+"/a/3", []byte("a/3"), 0)
		must.NoError(t, err)
		got := <-woken
		must.NoError(t, got.err)
		must.Eq(t, []string{ks + "/a/1", ks + "/a/2", ks + "/a/3"}, keys(got.kvs))
		must.NotEq(t, idx, got.idx)

		woken = waitPrefixAsync(ctx, st, ks+"/a/", got.idx, keys(got.kvs))
		must.NoError(t, writer.Delete(ctx, ks+"/a/1"))
		got = <-woken
		must.NoError(t, got.err)
		must.Eq(t, []string{ks + "/a/2", ks + "/a/3"}, keys(got.kvs))
	})

	t.Run("ephemeral key vanishes on revoke", func(t *testing.T) {
		f := newFixture(t)
		owner, watcher := connect(t, f), connect(t, f)
		ctx, key := testCtx(t, 10*time.Second), keyspace(t)+"/alive"
		lease, err := owner.Grant(ctx, f.ttl())
		must.NoError(t, err)
		must.NotEq(t, "", lease.ID())
		must.NoError(t, owner.PutEphemeral(ctx, lease, key, []byte("me")))
		v, err := watcher.Get(ctx, key)
		must.NoError(t, err)
		must.Eq(t, "me", string(v.Data))

		gone := waitAsync(ctx, watcher, key, v.Version)
		must.NoError(t, lease.Revoke(ctx))
		got := <-gone
		must.NoError(t, got.err)
		must.Eq(t, 0, got.v.Version)

		must.ErrorIs(t, lease.Renew(ctx), rendezvous.ErrLeaseNotFound)
		must.ErrorIs(t, owner.PutEphemeral(ctx, lease, key, []byte("again")), rendezvous.ErrLeaseNotFound)
	})

	t.Run("ephemeral key vanishes on ttl expiry", func(t *testing.T) {
		f := newFixture(t)
		owner, watcher := connect(t, f), connect(t, f)
		ctx, key := testCtx(t, 2*f.wallWait()), keyspace(t)+"/alive"
		ttl := f.ttl()
		lease, err := owner.Grant(ctx, ttl)
		must.NoError(t, err)
		must.NoError(t, owner.PutEphemeral(ctx, lease, key, []byte("me")))

		// Renewed in time, it lives past its first TTL.
		f.pass(ttl / 2)
		must.NoError(t, lease.Renew(ctx))
		f.pass(ttl / 2) // a whole TTL since the grant
		v, err := watcher.Get(ctx, key)
		must.NoError(t, err)
		must.Positive(t, v.Version, must.Sprint("key gone although its lease was renewed"))

		// Left alone, it expires.
		f.pass(ttl/2 + f.Expiry + ttl/4)
		wctx, cancel := context.WithTimeout(ctx, f.wallWait())
		defer cancel()
		got, err := watcher.Wait(wctx, key, v.Version)
		for err == nil && got.Version != 0 { // tolerate spurious wake-ups
			got, err = watcher.Wait(wctx, key, got.Version)
		}
		must.NoError(t, err, must.Sprint("ephemeral key outlived its lease"))
		must.ErrorIs(t, lease.Renew(ctx), rendezvous.ErrLeaseNotFound)
	})

	t.Run("keep alive renews until cancelled", func(t *testing.T) {
		f := newFixture(t)
		if f.Advance != nil {
			t.Skip("keep-alive runs on the client's wall clock; covered with a wall-clock store")
		}
		st := connect(t, f)
		ctx, key := testCtx(t, 5*f.wallWait()), keyspace(t)+"/alive"
		ttl := f.ttl()
		lease, err := st.Grant(ctx, ttl)
		must.NoError(t, err)
		must.NoError(t, st.PutEphemeral(ctx, lease, key, []byte("me")))
		kctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- lease.KeepAlive(kctx) }()
		time.Sleep(2*ttl + f.Expiry)
		v, err := st.Get(ctx, key)
		must.NoError(t, err)
		must.Positive(t, v.Version, must.Sprint("key expired although kept alive"))
		stop()
		must.NoError(t, <-done)
	})

	t.Run("transaction", func(t *testing.T) {
		f := newFixture(t)
		st, other := connect(t, f), connect(t, f)
		ctx, ks := testCtx(t, 10*time.Second), keyspace(t)
		lease, err := st.Grant(ctx, f.ttl())
		must.NoError(t, err)
		state, alive := ks+"/state", ks+"/alive/"

		// Check absent, write an ephemeral key, list: the list sees it.
		r, err := st.Txn(ctx, []rendezvous.TxnOp{
			{Kind: rendezvous.TxnCheck, Key: state},
			{Kind: rendezvous.TxnPutEphemeral, Key: alive + "a", Data: []byte("a"), Lease: lease},
			{Kind: rendezvous.TxnList, Key: alive},
		})
		must.NoError(t, err)
		must.True(t, r.OK)
		must.Positive(t, r.Version)
		must.Eq(t, []rendezvous.KeyValue{{Key: alive + "a", Data: []byte("a"), Version: r.Version}}, r.List)

		// Create with a CAS and write another key: one version for both.
		r, err = st.Txn(ctx, []rendezvous.TxnOp{
			{Kind: rendezvous.TxnCAS, Key: state, Data: []byte("s1")},
			{Kind: rendezvous.TxnPutEphemeral, Key: alive + "b", Data: []byte("b"), Lease: lease},
		})
		must.NoError(t, err)
		must.True(t, r.OK)
		s1, err := other.Get(ctx, state)
		must.NoError(t, err)
		must.Eq(t, rendezvous.Value{Data: []byte("s1"), Version: r.Version}, s1)
		b, err := other.Get(ctx, alive+"b")
		must.NoError(t, err)
		must.Eq(t, r.Version, b.Version)

		// A stale check or CAS fails the whole transaction, naming the op
		// and the key's current value; nothing is written.
		for _, guard := range []rendezvous.TxnOp{
			{Kind: rendezvous.TxnCheck, Key: state},                                           // absent, but it exists
			{Kind: rendezvous.TxnCheck, Key: state, Version: s1.Version + 1000},               // another version
			{Kind: rendezvous.TxnCAS, Key: state, Data: []byte("x"), Version: s1.Version - 1}, // stale
		} {
			r, err = st.Txn(ctx, []rendezvous.TxnOp{
				{Kind: rendezvous.TxnPutEphemeral, Key: alive + "c", Data: []byte("c"), Lease: lease},
				guard,
				{Kind: rendezvous.TxnList, Key: alive},
			})
			must.NoError(t, err)
			must.False(t, r.OK, must.Sprintf("guard %+v passed", guard))
			must.Eq(t, 1, r.Failed)
			must.Eq(t, s1, r.Current)
			c, err := other.Get(ctx, alive+"c")
			must.NoError(t, err)
			must.Eq(t, 0, c.Version, must.Sprint("a failed transaction wrote"))
		}

		// A check of the current version passes; the ephemeral keys of
		// transactions vanish with their lease.
		r, err = st.Txn(ctx, []rendezvous.TxnOp{
			{Kind: rendezvous.TxnCheck, Key: state, Version: s1.Version},
			{Kind: rendezvous.TxnList, Key: alive},
		})
		must.NoError(t, err)
		must.True(t, r.OK)
		must.Eq(t, []string{alive + "a", alive + "b"}, keys(r.List))
		must.NoError(t, lease.Revoke(ctx))
		kvs, _, err := other.List(ctx, alive)
		must.NoError(t, err)
		must.SliceEmpty(t, kvs)
		_, err = st.Txn(ctx, []rendezvous.TxnOp{{Kind: rendezvous.TxnPutEphemeral, Key: alive + "a", Lease: lease}})
		must.ErrorIs(t, err, rendezvous.ErrLeaseNotFound)

		// Malformed transactions are refused, and so is one over Consul's
		// limit on ops.
		var tooMany []rendezvous.TxnOp
		for i := range rendezvous.MaxTxnOps + 1 {
			tooMany = append(tooMany, rendezvous.TxnOp{Kind: rendezvous.TxnCheck, Key: fmt.Sprintf("%s/k%d", ks, i)})
		}
		for _, ops := range [][]rendezvous.TxnOp{
			{{Kind: rendezvous.TxnList, Key: alive}, {Kind: rendezvous.TxnCheck, Key: state}},
			{{Kind: rendezvous.TxnCheck, Key: state}, {Kind: rendezvous.TxnCAS, Key: state}},
			{{Kind: rendezvous.TxnPutEphemeral, Key: alive + "a"}},
			tooMany,
		} {
			_, err := st.Txn(ctx, ops)
			must.Error(t, err)
		}
		_, err = st.Txn(ctx, tooMany[:rendezvous.MaxTxnOps])
		must.NoError(t, err, must.Sprint("a transaction at the limit"))
		_, err = st.Grant(ctx, rendezvous.MaxLeaseTTL+time.Second)
		must.Error(t, err, must.Sprint("a lease over Consul's TTL limit"))
	})

	t.Run("closed store refuses calls", func(t *testing.T) {
		st := newFixture(t).Connect(t)
		must.NoError(t, st.Close())
		_, err := st.Get(testCtx(t, 5*time.Second), keyspace(t)+"/k")
		must.ErrorIs(t, err, rendezvous.ErrClosed)
	})
}

func increment(ctx context.Context, st rendezvous.Store, key string) error {
	for {
		v, err := st.Get(ctx, key)
		if err != nil {
			return err
		}
		n := 0
		if v.Version != 0 {
			if _, err := fmt.Sscan(string(v.Data), &n); err != nil {
				return fmt.Errorf("counter %q: %w", v.Data, err)
			}
		}
		_, ok, err := st.CompareAndSet(ctx, key, []byte(fmt.Sprint(n+1)), v.Version)
		if err != nil || ok {
			return err
		}
	}
}

type waitResult struct {
	v   rendezvous.Value
	err error
}

// waitAsync waits on key in a goroutine, skipping spurious wake-ups that
// return the same version.
func waitAsync(ctx context.Context, st rendezvous.Store, key string, after uint64) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		for {
			v, err := st.Wait(ctx, key, after)
			if err != nil || v.Version != after {
				ch <- waitResult{v, err}
				return
			}
		}
	}()
	return ch
}

type prefixResult struct {
	kvs []rendezvous.KeyValue
	idx uint64
	err error
}

// waitPrefixAsync waits on prefix in a goroutine until its key set differs
// from before, skipping spurious wake-ups.
func waitPrefixAsync(ctx context.Context, st rendezvous.Store, prefix string, after uint64, before []string) <-chan prefixResult {
	ch := make(chan prefixResult, 1)
	go func() {
		for {
			kvs, idx, err := st.WaitPrefix(ctx, prefix, after)
			if err != nil || !slices.Equal(keys(kvs), before) {
				ch <- prefixResult{kvs, idx, err}
				return
			}
			after = idx
		}
	}()
	return ch
}

func keys(kvs []rendezvous.KeyValue) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.Key
	}
	return out
}
