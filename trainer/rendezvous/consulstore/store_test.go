package consulstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
)

func TestNextIndex(t *testing.T) {
	for _, tc := range []struct {
		name             string
		prev, last, want uint64
	}{
		{"first read", 0, 42, 42},
		{"unchanged", 42, 42, 42},
		{"moved on", 42, 50, 50},
		{"went backwards: start over", 42, 7, 0},
		{"zero index clamped to block", 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, consulstore.NextIndex(tc.prev, tc.last))
		})
	}
}

func wallFake(t *testing.T) (*fakeconsul.Server, consulstore.Config) {
	fake := fakeconsul.New(fakeconsul.Options{MinTTL: 100 * time.Millisecond})
	t.Cleanup(fake.Close)
	return fake, consulstore.Config{Address: fake.Addr(), MinTTL: 100 * time.Millisecond,
		WaitTime: 300 * time.Millisecond, Prefix: "p/"}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestGrantSessionShape(t *testing.T) {
	fake, cfg := wallFake(t)
	cfg.MinTTL = 0 // Consul's 10s
	st := newStore(t, cfg)
	defer st.Close()
	l, err := st.Grant(ctxFor(t, 5*time.Second), time.Second)
	must.NoError(t, err)
	must.Eq(t, 10*time.Second, l.TTL(), must.Sprint("a TTL under session_ttl_min is raised to it"))
	info, live := fake.Session(l.ID())
	must.True(t, live)
	must.Eq(t, fakeconsul.SessionInfo{
		ID: l.ID(), Name: consulstore.DefaultSessionName, TTL: 10 * time.Second, Behavior: "delete",
		LockDelay:  time.Millisecond, // not Consul's 15s default
		NodeChecks: []string{},       // not the agent's serfHealth
	}, info)
}

func TestSpuriousWakeupsNeitherReturnNorSpin(t *testing.T) {
	fake, cfg := wallFake(t)
	st := newStore(t, cfg)
	defer st.Close()
	ctx := ctxFor(t, 10*time.Second)
	v, ok, err := st.CompareAndSet(ctx, "k", []byte("a"), 0)
	must.NoError(t, err)
	must.True(t, ok)
	fake.Spurious.Store(true)
	before := fake.Requests.Load()
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = st.Wait(wctx, "k", v.Version)
	must.ErrorIs(t, err, context.DeadlineExceeded, must.Sprint("a wake-up with nothing changed ended Wait"))
	_, _, err = st.WaitPrefix(wctx, "", v.Version)
	must.ErrorIs(t, err, context.DeadlineExceeded)
	// Paced at RetryPause (100ms): about 5 queries in 500ms, not 50.
	must.Between(t, 2, fake.Requests.Load()-before, 12)

	// A real change still wakes it.
	got := make(chan rendezvous.Value, 1)
	go func() {
		v, _ := st.Wait(ctx, "k", v.Version)
		got <- v
	}()
	v2, ok, err := newStore(t, cfg).CompareAndSet(ctx, "k", []byte("b"), v.Version)
	must.NoError(t, err)
	must.True(t, ok)
	must.Eq(t, v2, <-got)
}

func TestWaitPrefixSurvivesIndexReset(t *testing.T) {
	fake, cfg := wallFake(t)
	st := newStore(t, cfg)
	defer st.Close()
	ctx := ctxFor(t, 10*time.Second)
	for _, k := range []string{"m/a", "m/b"} {
		_, _, err := st.CompareAndSet(ctx, k, []byte(k), 0)
		must.NoError(t, err)
	}
	must.NoError(t, st.Delete(ctx, "m/b"))
	_, idx, err := st.List(ctx, "m/")
	must.NoError(t, err)

	// The tombstone that made the index goes: the prefix's index goes back.
	fake.ReapTombstones()
	kvs, back, err := st.WaitPrefix(ctx, "m/", idx)
	must.NoError(t, err)
	must.Less(t, idx, back, must.Sprint("index did not go backwards"))
	must.Len(t, 1, kvs)

	// Passing the lower index back blocks properly and wakes on a write.
	woke := make(chan []rendezvous.KeyValue, 1)
	go func() {
		kvs, _, _ := st.WaitPrefix(ctx, "m/", back)
		woke <- kvs
	}()
	time.Sleep(50 * time.Millisecond)
	_, _, err = st.CompareAndSet(ctx, "m/c", []byte("c"), 0)
	must.NoError(t, err)
	must.Len(t, 2, <-woke)
}

// putWays are the two ways to write an ephemeral key: PutEphemeral, and a
// transaction's put_ephemeral (a "lock" op), which must behave alike.
var putWays = []struct {
	name string
	put  func(ctx context.Context, st *consulstore.Store, l rendezvous.Lease, key string, data []byte) error
}{
	{"put ephemeral", func(ctx context.Context, st *consulstore.Store, l rendezvous.Lease, key string, data []byte) error {
		return st.PutEphemeral(ctx, l, key, data)
	}},
	{"transaction", func(ctx context.Context, st *consulstore.Store, l rendezvous.Lease, key string, data []byte) error {
		r, err := st.Txn(ctx, []rendezvous.TxnOp{{Kind: rendezvous.TxnPutEphemeral, Key: key, Data: data, Lease: l}})
		if err == nil && !r.OK {
			err = fmt.Errorf("transaction not applied: %+v", r)
		}
		return err
	}},
}

func TestPutEphemeralTakesOverFromAnotherSession(t *testing.T) {
	for _, way := range putWays {
		t.Run(way.name, func(t *testing.T) {
			fake, cfg := wallFake(t)
			old, cur := newStore(t, cfg), newStore(t, cfg)
			defer old.Close()
			defer cur.Close()
			ctx := ctxFor(t, 10*time.Second)
			l1, err := old.Grant(ctx, time.Minute)
			must.NoError(t, err)
			must.NoError(t, way.put(ctx, old, l1, "alive/m1", []byte("old")))
			l2, err := cur.Grant(ctx, time.Minute)
			must.NoError(t, err)
			must.NoError(t, way.put(ctx, cur, l2, "alive/m1", []byte("new")))
			v, err := cur.Get(ctx, "alive/m1")
			must.NoError(t, err)
			must.Eq(t, "new", string(v.Data))
			_, live := fake.Session(l1.ID())
			must.False(t, live, must.Sprint("the previous holder's session survived"))
			must.ErrorIs(t, l1.Renew(ctx), rendezvous.ErrLeaseNotFound)

			// A lease from another store is refused rather than misused.
			must.Error(t, way.put(ctx, old, l2, "alive/m2", nil))
		})
	}
}

func TestCloseEndsPendingWaitsAndSessions(t *testing.T) {
	fake, cfg := wallFake(t)
	cfg.WaitTime = time.Minute
	st := newStore(t, cfg)
	ctx := ctxFor(t, 10*time.Second)
	l, err := st.Grant(ctx, time.Minute)
	must.NoError(t, err)
	must.NoError(t, st.PutEphemeral(ctx, l, "alive/x", []byte("x")))
	errc := make(chan error, 1)
	go func() {
		_, err := st.Wait(ctx, "never", 0)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	must.NoError(t, st.Close())
	select {
	case err := <-errc:
		must.ErrorIs(t, err, rendezvous.ErrClosed)
	case <-time.After(3 * time.Second):
		t.Fatal("Close left a blocking query running")
	}
	_, live := fake.Session(l.ID())
	must.False(t, live, must.Sprint("Close left its session alive"))
	v, err := newStore(t, cfg).Get(ctx, "alive/x")
	must.NoError(t, err)
	must.Eq(t, 0, v.Version, must.Sprint("the closed store's ephemeral key survived"))
	must.NoError(t, st.Close())
}

func TestKeysLiveUnderThePrefix(t *testing.T) {
	_, cfg := wallFake(t)
	st := newStore(t, cfg)
	defer st.Close()
	ctx := ctxFor(t, 5*time.Second)
	_, _, err := st.CompareAndSet(ctx, "run/state", []byte("s"), 0)
	must.NoError(t, err)
	p, _, err := st.Client().KV().Get("p/run/state", nil)
	must.NoError(t, err)
	must.NotNil(t, p)
	kvs, _, err := st.List(ctx, "run/")
	must.NoError(t, err)
	must.Eq(t, "run/state", kvs[0].Key, must.Sprint("List must strip the prefix"))
}

func TestAgentUnreachable(t *testing.T) {
	st := newStore(t, consulstore.Config{Address: "127.0.0.1:1", RequestTimeout: time.Second})
	defer st.Close()
	_, err := st.Get(ctxFor(t, 5*time.Second), "k")
	must.Error(t, err)
	must.StrContains(t, err.Error(), fmt.Sprintf("consul get %s", "k"))
}

// A session created without a lock delay gets Consul's 15s: its key cannot
// be taken for that long after it dies. Ours use 1ms, so a restarted
// member takes its key back at once.
func TestLockDelayOfDeadSessions(t *testing.T) {
	for _, way := range putWays {
		t.Run(way.name, func(t *testing.T) {
			_, cfg := wallFake(t)
			st := newStore(t, cfg)
			ctx := ctxFor(t, 10*time.Second)
			sess := st.Client().Session()
			foreign, _, err := sess.Create(&capi.SessionEntry{Behavior: capi.SessionBehaviorDelete}, nil)
			must.NoError(t, err)
			ok, _, err := st.Client().KV().Acquire(&capi.KVPair{Key: "p/alive/m1", Session: foreign}, nil)
			must.NoError(t, err)
			must.True(t, ok)
			_, err = sess.Destroy(foreign, nil)
			must.NoError(t, err)

			l, err := st.Grant(ctx, time.Minute)
			must.NoError(t, err)
			err = way.put(ctx, st, l, "alive/m1", []byte("me"))
			must.ErrorIs(t, err, consulstore.ErrKeyHeld)
			must.StrContains(t, err.Error(), "lock delay")

			// Our own dead session's key is free again right away.
			must.NoError(t, way.put(ctx, st, l, "alive/m2", []byte("me")))
			must.NoError(t, l.Revoke(ctx))
			l2, err := st.Grant(ctx, time.Minute)
			must.NoError(t, err)
			time.Sleep(5 * time.Millisecond)
			must.NoError(t, way.put(ctx, st, l2, "alive/m2", []byte("me again")))
		})
	}
}

func TestWaitsRideOutAShortOutage(t *testing.T) {
	fake, cfg := wallFake(t)
	cfg.ErrorGrace = time.Second
	st := newStore(t, cfg)
	ctx := ctxFor(t, 10*time.Second)
	v, _, err := st.CompareAndSet(ctx, "k", []byte("a"), 0)
	must.NoError(t, err)

	// A few failing queries (no leader for a moment) are retried.
	fake.Fail.Store(3)
	got := make(chan rendezvous.Value, 1)
	go func() {
		v, err := st.Wait(ctx, "k", 0)
		must.NoError(t, err)
		got <- v
	}()
	must.Eq(t, v, <-got)
	fake.Fail.Store(3)
	kvs, _, err := st.WaitPrefix(ctx, "", 0)
	must.NoError(t, err)
	must.Len(t, 1, kvs)

	// An outage longer than the grace period is an error.
	fake.Fail.Store(1 << 30)
	start := time.Now()
	_, err = st.Wait(ctx, "k", v.Version)
	must.Error(t, err)
	must.StrContains(t, err.Error(), "No cluster leader")
	must.Between(t, time.Second, time.Since(start), 5*time.Second)
	fake.Fail.Store(0)
}

// silentAgent fronts the fake agent and, once mute, answers nothing: each
// request hangs until its client gives up, as on a connection the agent no
// longer answers on.
func silentAgent(t *testing.T, backend string) (addr string, mute *atomic.Bool) {
	mute = new(atomic.Bool)
	u, err := url.Parse("http://" + backend)
	must.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mute.Load() {
			// Read the body, so that the server notices the client hang up.
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), mute
}

// Renewals, blocking waits and health updates are each bounded, so a
// silent agent makes them fail in time instead of hanging past the
// session's life.
func TestSilentAgentFailsCallsInTime(t *testing.T) {
	fake, cfg := wallFake(t)
	addr, mute := silentAgent(t, fake.Addr())
	cfg.Address = addr
	cfg.RequestTimeout = 200 * time.Millisecond
	cfg.ErrorGrace = 300 * time.Millisecond
	st := newStore(t, cfg)
	ctx := ctxFor(t, 20*time.Second)
	lease, err := st.Grant(ctx, 200*time.Millisecond)
	must.NoError(t, err)
	kept := make(chan error, 1)
	go func() { kept <- lease.KeepAlive(ctx) }()
	v, _, err := st.CompareAndSet(ctx, "k", []byte("a"), 0)
	must.NoError(t, err)
	time.Sleep(500 * time.Millisecond) // a few renewals go through
	select {
	case err := <-kept:
		t.Fatalf("keep-alive ended while the agent answered: %v", err)
	default:
	}

	mute.Store(true)
	start := time.Now()
	waited := make(chan error, 1)
	go func() {
		_, err := st.Wait(ctx, "k", v.Version)
		waited <- err
	}()
	// The keep-alive gives up one TTL after its last renewal, its last
	// attempt bounded by RequestTimeout.
	select {
	case err := <-kept:
		must.Error(t, err)
		must.Less(t, 2*time.Second, time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("keep-alive still blocked on a silent agent")
	}
	// The wait's blocking query is bounded by WaitTime, its jitter and
	// RequestTimeout; then the grace period for failing queries runs out.
	select {
	case err := <-waited:
		must.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("wait still blocked on a silent agent")
	}

	client, _, err := consulstore.NewClient(addr)
	must.NoError(t, err)
	h := consulstore.NewHealth(client, consulstore.HealthOptions{RequestTimeout: 200 * time.Millisecond})
	start = time.Now()
	must.Error(t, h.Register(ctx, "trainer", "w", "", 0, time.Second))
	must.Less(t, 2*time.Second, time.Since(start))
}
