package rendezvous_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/rendezvoustest"
)

// memFixture is a MemStore on a fake clock, shared by every handle.
func memFixture(t *testing.T) rendezvoustest.Fixture {
	clock := rendezvoustest.NewFakeClock(time.Unix(1_700_000_000, 0))
	st := rendezvous.NewMemStore(clock)
	t.Cleanup(func() { st.Close() })
	return rendezvoustest.Fixture{
		Connect: func(*testing.T) rendezvous.Store { return rendezvoustest.Handle(st) },
		Advance: clock.Advance,
	}
}

// wallMemFixture is a MemStore on the wall clock with a short TTL.
func wallMemFixture(t *testing.T) rendezvoustest.Fixture {
	st := rendezvous.NewMemStore(nil)
	t.Cleanup(func() { st.Close() })
	return rendezvoustest.Fixture{
		Connect: func(*testing.T) rendezvous.Store { return rendezvoustest.Handle(st) },
		TTL:     time.Second,
	}
}

var testSecret = []byte("conformance-secret")

// serve starts a Server for st on a loopback port and returns its address.
func serve(t testing.TB, st *rendezvous.MemStore, secret []byte, logger hclog.Logger) string {
	t.Helper()
	return serveConfig(t, st, rendezvous.ServerConfig{Secret: secret, Logger: logger})
}

// serveConfig is serve with more of the server's settings; cfg.Listener is
// made here.
func serveConfig(t testing.TB, st *rendezvous.MemStore, cfg rendezvous.ServerConfig) string {
	t.Helper()
	lc := net.ListenConfig{KeepAlive: -1} // as StartEmbedded
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	must.NoError(t, err)
	cfg.Listener = ln
	srv, err := rendezvous.NewServer(st, cfg)
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		must.NoError(t, <-done)
	})
	return srv.Addr()
}

func dial(t testing.TB, addr string, secret []byte) *rendezvous.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := rendezvous.Dial(ctx, addr, secret, nil)
	must.NoError(t, err)
	return c
}

// tcpFixture serves a MemStore on a fake clock; each handle is its own
// authenticated connection.
func tcpFixture(t *testing.T) rendezvoustest.Fixture {
	clock := rendezvoustest.NewFakeClock(time.Unix(1_700_000_000, 0))
	st := rendezvous.NewMemStore(clock)
	t.Cleanup(func() { st.Close() })
	addr := serve(t, st, testSecret, nil)
	return rendezvoustest.Fixture{
		Connect: func(t *testing.T) rendezvous.Store { return dial(t, addr, testSecret) },
		Advance: clock.Advance,
	}
}

// wallTCPFixture is tcpFixture on the wall clock.
func wallTCPFixture(t *testing.T) rendezvoustest.Fixture {
	st := rendezvous.NewMemStore(nil)
	t.Cleanup(func() { st.Close() })
	addr := serve(t, st, testSecret, nil)
	return rendezvoustest.Fixture{
		Connect: func(t *testing.T) rendezvous.Store { return dial(t, addr, testSecret) },
		TTL:     time.Second,
	}
}

func TestMemStoreConformance(t *testing.T) { rendezvoustest.RunStoreConformance(t, memFixture) }

func TestMemStoreWallClockConformance(t *testing.T) {
	t.Parallel()
	rendezvoustest.RunStoreConformance(t, wallMemFixture)
}

func TestTCPStoreConformance(t *testing.T) { rendezvoustest.RunStoreConformance(t, tcpFixture) }

func TestTCPStoreWallClockConformance(t *testing.T) {
	t.Parallel()
	rendezvoustest.RunStoreConformance(t, wallTCPFixture)
}

func TestMemRendezvousConformance(t *testing.T) {
	rendezvoustest.RunRendezvousConformance(t, memFixture)
}

func TestTCPRendezvousConformance(t *testing.T) {
	rendezvoustest.RunRendezvousConformance(t, tcpFixture)
}

// spurious wraps a store so that its waits sometimes return early with
// nothing changed and its prefix indexes sometimes reset to zero, as Consul
// blocking queries may; the rendezvous must not notice.
type spurious struct {
	rendezvous.Store

	mu  sync.Mutex
	rng *rand.Rand
}

func (s *spurious) coin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(3) == 0
}

func (s *spurious) Wait(ctx context.Context, key string, after uint64) (rendezvous.Value, error) {
	if s.coin() {
		time.Sleep(time.Millisecond)
		return s.Store.Get(ctx, key)
	}
	return s.Store.Wait(ctx, key, after)
}

func (s *spurious) WaitPrefix(ctx context.Context, prefix string, after uint64) ([]rendezvous.KeyValue, uint64, error) {
	if s.coin() {
		time.Sleep(time.Millisecond)
		kvs, idx, err := s.Store.List(ctx, prefix)
		if s.coin() {
			idx = 0
		}
		return kvs, idx, err
	}
	return s.Store.WaitPrefix(ctx, prefix, after)
}

func TestRendezvousConformanceWithSpuriousWakeups(t *testing.T) {
	var seed atomic.Uint64
	rendezvoustest.RunRendezvousConformance(t, func(t *testing.T) rendezvoustest.Fixture {
		f := memFixture(t)
		connect := f.Connect
		f.Connect = func(t *testing.T) rendezvous.Store {
			return &spurious{Store: connect(t), rng: rand.New(rand.NewPCG(seed.Add(1), 7))}
		}
		return f
	})
}

// A member that saw the gang whole and died before writing the complete
// generation (its lease still alive) does not strand the others: the
// waiting member that folds lists the records again and completes it.
func TestWaitingFolderCompletesWhenTheCompleterDied(t *testing.T) {
	st := rendezvous.NewMemStore(nil)
	t.Cleanup(func() { st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		s   *rendezvous.Session
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := rendezvous.Join(ctx, st, "run", rendezvous.Member{ID: "a"}, rendezvous.Fixed(2), rendezvous.Options{})
		done <- result{s, err}
	}()
	for {
		kvs, _, err := st.List(ctx, "run/gen/1/alive/")
		must.NoError(t, err)
		if len(kvs) == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// b signs in as Join would, sees the gang whole, and stops there.
	lease, err := st.Grant(ctx, time.Minute)
	must.NoError(t, err)
	rec, err := json.Marshal(rendezvous.Joiner{Participant: rendezvous.Participant{Member: rendezvous.Member{ID: "b"}, Incarnation: "x"}, WorldSize: 2})
	must.NoError(t, err)
	r, err := st.Txn(ctx, []rendezvous.TxnOp{
		{Kind: rendezvous.TxnCheck, Key: "run/state"},
		{Kind: rendezvous.TxnPutEphemeral, Key: "run/gen/1/alive/b", Data: rec, Lease: lease},
		{Kind: rendezvous.TxnList, Key: "run/gen/1/alive/"},
	})
	must.NoError(t, err)
	must.True(t, r.OK)
	must.Len(t, 2, r.List)

	j := <-done
	must.NoError(t, j.err)
	t.Cleanup(func() { j.s.Leave(context.Background()) })
	a := j.s.Assignment()
	must.Eq(t, 1, a.Generation)
	must.Eq(t, []string{"a", "b"}, []string{a.Peers[0].ID, a.Peers[1].ID})
}
