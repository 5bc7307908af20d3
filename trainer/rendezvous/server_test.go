package rendezvous_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/internal/auth"
	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/rendezvoustest"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStrangerRefused(t *testing.T) {
	st := rendezvous.NewMemStore(nil)
	t.Cleanup(func() { st.Close() })
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	// A stranger whose first request is shorter than a nonce leaves the
	// server waiting for the rest until the handshake times out.
	addr := serveConfig(t, st, rendezvous.ServerConfig{Secret: testSecret, Logger: logger, HandshakeTimeout: 300 * time.Millisecond})

	t.Run("wrong secret", func(t *testing.T) {
		_, err := rendezvous.Dial(ctxFor(t, 5*time.Second), addr, []byte("not-the-secret"), nil)
		must.ErrorIs(t, err, auth.ErrUnauthenticated)
	})

	t.Run("no secret", func(t *testing.T) {
		c, err := rendezvous.Dial(ctxFor(t, 5*time.Second), addr, nil, nil)
		must.NoError(t, err) // it cannot know until it speaks
		defer c.Close()
		_, ok, err := c.CompareAndSet(ctxFor(t, 10*time.Second), "stranger/key", []byte("x"), 0)
		must.Error(t, err)
		must.False(t, ok)
		v, err := st.Get(context.Background(), "stranger/key")
		must.NoError(t, err)
		must.Eq(t, 0, v.Version, must.Sprint("a stranger wrote to the store"))
	})

	t.Run("raw junk", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		must.NoError(t, err)
		defer conn.Close()
		_, err = conn.Write(bytes.Repeat([]byte{0x42}, 64))
		must.NoError(t, err)
		must.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err = io.ReadAll(conn) // the server sends its nonce, then hangs up
		must.NoError(t, err)
	})

	eventually(t, 5*time.Second, func() bool { return strings.Count(logs.String(), "refused connection") >= 3 },
		"three refusals logged")
}

// Without a secret the server takes any connection, but a malformed frame
// ends it.
func TestServerDropsMalformedFrames(t *testing.T) {
	st := rendezvous.NewMemStore(nil)
	t.Cleanup(func() { st.Close() })
	addr := serve(t, st, nil, nil)
	frame := func(body string) []byte {
		out := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		return append(out, body...)
	}
	// body lays out a request as the wire does: tag, id, op, key, data,
	// version, lease, ttl, wait, target, ops.
	body := func(id uint64, op string, ttl int64, tail ...byte) string {
		b := binary.AppendUvarint([]byte{'q'}, id)
		b = append(binary.AppendUvarint(b, uint64(len(op))), op...)
		b = append(b, 0, 0, 0, 0) // key, data, version, lease
		b = binary.AppendVarint(b, ttl)
		b = append(b, 0, 0, 0) // wait, target, ops
		return string(append(b, tail...))
	}
	cases := map[string][]byte{
		"zero length":    {0, 0, 0, 0},
		"too long":       {0xff, 0xff, 0xff, 0xff},
		"not a request":  frame("{{{"),
		"unknown op":     frame(body(1, "explode", 0)),
		"no id":          frame(body(0, "get", 0)),
		"negative ttl":   frame(body(1, "grant", -1)),
		"trailing bytes": frame(body(1, "get", 0, 7)),
		"truncated":      frame(body(1, "get", 0)[:5]),
	}
	// The same layout is served when well formed.
	conn, err := net.Dial("tcp", addr)
	must.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write(frame(body(1, "ping", 0)))
	must.NoError(t, err)
	must.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = io.ReadFull(conn, make([]byte, 5))
	must.NoError(t, err, must.Sprint("no answer to a well-formed ping"))

	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			must.NoError(t, err)
			defer conn.Close()
			_, err = conn.Write(bad)
			must.NoError(t, err)
			must.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
			n, err := conn.Read(make([]byte, 1))
			must.Eq(t, 0, n)
			must.ErrorIs(t, err, io.EOF)
		})
	}
}

// A client's leases die with its connection, long before their TTL on a
// clock that never moves.
func TestConnectionCloseRevokesLeases(t *testing.T) {
	f := tcpFixture(t)
	owner, watcher := f.Connect(t), f.Connect(t)
	defer watcher.Close()
	ctx := ctxFor(t, 10*time.Second)
	lease, err := owner.Grant(ctx, time.Hour)
	must.NoError(t, err)
	must.NoError(t, owner.PutEphemeral(ctx, lease, "run/alive/x", []byte("x")))
	v, err := watcher.Get(ctx, "run/alive/x")
	must.NoError(t, err)
	must.Positive(t, v.Version)
	must.NoError(t, owner.Close())
	got, err := watcher.Wait(ctx, "run/alive/x", v.Version)
	must.NoError(t, err)
	must.Eq(t, 0, got.Version)
}

// A member whose process vanishes without Leave (its connection closes) is
// seen as lost by the others.
func TestRendezvousLossOnConnectionClose(t *testing.T) {
	f := tcpFixture(t)
	ctx := ctxFor(t, 20*time.Second)
	stores := make([]rendezvous.Store, 3)
	sessions := make([]*rendezvous.Session, 3)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range stores {
		stores[i] = f.Connect(t)
		defer stores[i].Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := rendezvous.Member{ID: []string{"a", "b", "c"}[i], Node: "n", RankHint: i}
			sessions[i], errs[i] = rendezvous.Join(ctx, stores[i], "conn-loss", me, rendezvous.Fixed(3), rendezvous.Options{LeaseTTL: time.Hour})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		must.NoError(t, err)
	}
	w0, w1 := sessions[0].WatchLoss(ctx), sessions[1].WatchLoss(ctx)
	must.NoError(t, stores[2].Close())
	for _, w := range []<-chan rendezvous.LostEvent{w0, w1} {
		select {
		case ev := <-w:
			must.Eq(t, rendezvous.ReasonMemberLost, ev.Reason)
			must.Eq(t, "c", ev.Member)
		case <-ctx.Done():
			t.Fatal("loss not observed")
		}
	}
	// The member that lost its store sees that too.
	select {
	case ev := <-sessions[2].WatchLoss(ctx):
		must.Eq(t, rendezvous.ReasonStoreError, ev.Reason)
		must.ErrorIs(t, ev.Err, rendezvous.ErrClosed)
	case <-ctx.Done():
		t.Fatal("own store loss not observed")
	}
}

// One connection carries a blocked wait and other calls at once.
func TestClientMultiplexes(t *testing.T) {
	f := tcpFixture(t)
	c := f.Connect(t)
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	waiting := make(chan rendezvous.Value, 1)
	go func() {
		v, err := c.Wait(ctx, "mux/k", 0)
		if err != nil {
			t.Error(err)
		}
		waiting <- v
	}()
	for i := range 20 {
		_, err := c.Get(ctx, "mux/other")
		must.NoError(t, err, must.Sprintf("get %d behind a blocked wait", i))
	}
	v, ok, err := c.CompareAndSet(ctx, "mux/k", []byte("v"), 0)
	must.NoError(t, err)
	must.True(t, ok)
	must.Eq(t, v.Version, (<-waiting).Version)
}

// Serve returns when its context ends and the clients see the store closed.
func TestServeStops(t *testing.T) {
	st := rendezvous.NewMemStore(nil)
	defer st.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	srv, err := rendezvous.NewServer(st, rendezvous.ServerConfig{Listener: ln})
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	c := dial(t, srv.Addr(), nil)
	defer c.Close()
	wctx := ctxFor(t, 10*time.Second)
	waitErr := make(chan error, 1)
	go func() {
		_, err := c.Wait(wctx, "k", 0)
		waitErr <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	must.NoError(t, <-done)
	err = <-waitErr
	must.ErrorIs(t, err, rendezvous.ErrClosed)
	must.False(t, errors.Is(err, context.DeadlineExceeded))
	_, err = rendezvous.Dial(ctxFor(t, 2*time.Second), srv.Addr(), nil, nil)
	must.Error(t, err)
}

func TestOpen(t *testing.T) {
	st := rendezvous.NewMemStore(nil)
	t.Cleanup(func() { st.Close() })
	addr := serve(t, st, testSecret, nil)
	t.Run("embedded", func(t *testing.T) {
		s, err := rendezvous.Open(ctxFor(t, 5*time.Second), "embedded://"+addr, testSecret, nil)
		must.NoError(t, err)
		defer s.Close()
		_, err = s.Get(ctxFor(t, 5*time.Second), "k")
		must.NoError(t, err)
	})
	bad := []struct {
		uri string
		err error
	}{
		{"consul://127.0.0.1:8500", rendezvous.ErrBackendNotBuilt},
		{"consul://", rendezvous.ErrBackendNotBuilt},
		{"embedded://", nil},
		{"embedded://127.0.0.1", nil},
		{"embedded://" + addr + "/path", nil},
		{"etcd://x:1", nil},
		{"::not a uri", nil},
	}
	for _, tc := range bad {
		t.Run(tc.uri, func(t *testing.T) {
			_, err := rendezvous.Open(ctxFor(t, 5*time.Second), tc.uri, testSecret, nil)
			must.Error(t, err)
			if tc.err != nil {
				must.ErrorIs(t, err, tc.err)
			}
		})
	}
}

// A member whose lease expires (its keep-alive stalled) is seen lost by
// everyone, itself included.
func TestRendezvousLossOnLeaseExpiry(t *testing.T) {
	clock := rendezvoustest.NewFakeClock(time.Unix(1_700_000_000, 0))
	st := rendezvous.NewMemStore(clock)
	t.Cleanup(func() { st.Close() })
	ctx := ctxFor(t, 20*time.Second)
	sessions := make([]*rendezvous.Session, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := rendezvous.Member{ID: []string{"a", "b"}[i], RankHint: i}
			// The keep-alive sleeps on the store's fake clock, so the
			// leases live until the test advances it.
			sessions[i], errs[i] = rendezvous.Join(ctx, st, "expiry", me, rendezvous.Fixed(2), rendezvous.Options{LeaseTTL: time.Hour})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		must.NoError(t, err)
	}
	w0, w1 := sessions[0].WatchLoss(ctx), sessions[1].WatchLoss(ctx)
	// A keep-alive woken by Advance may renew in the instant before the
	// expiry timer fires; advancing again lets the lease run out anyway.
	for _, w := range []<-chan rendezvous.LostEvent{w0, w1} {
		for got := false; !got; {
			clock.Advance(time.Hour + time.Second)
			select {
			case ev := <-w:
				// Either the watch sees an alive key vanish first, or the
				// member's own keep-alive finds its lease gone first.
				must.SliceContains(t, []rendezvous.LossReason{rendezvous.ReasonMemberLost, rendezvous.ReasonLeaseLost}, ev.Reason)
				got = true
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				t.Fatal("expiry not observed")
			}
		}
	}
}
