package rendezvous_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// failingListener fails its first fails accepts with err, then accepts
// from the real listener.
type failingListener struct {
	net.Listener
	fails atomic.Int32
	err   error
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, l.err
	}
	return l.Listener.Accept()
}

// startServer serves st on ln with cfg. It returns a function that stops
// the server and returns what Serve returned, and a channel closed when
// Serve has returned.
func startServer(t *testing.T, st *rendezvous.MemStore, ln net.Listener, cfg rendezvous.ServerConfig) (stop func() error, done <-chan struct{}) {
	t.Helper()
	cfg.Listener = ln
	srv, err := rendezvous.NewServer(st, cfg)
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan struct{})
	var serveErr error
	go func() { defer close(ch); serveErr = srv.Serve(ctx) }()
	stop = func() error {
		cancel()
		<-ch
		return serveErr
	}
	t.Cleanup(func() { stop() })
	return stop, ch
}

// Running out of descriptors (EMFILE: a flood of connections, a low
// ulimit) used to end Serve for good, and with it every rendezvous of the
// run. The server now waits and accepts again, backing off from 5 ms
// doubling up to 1 s, and logs each failure.
func TestServeRetriesTemporaryAcceptErrors(t *testing.T) {
	const fails = 6
	st := rendezvous.NewMemStore(nil)
	t.Cleanup(func() { st.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	fl := &failingListener{Listener: ln, err: &net.OpError{Op: "accept", Net: "tcp",
		Err: os.NewSyscallError("accept4", syscall.EMFILE)}}
	fl.fails.Store(fails)
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})
	stop, done := startServer(t, st, fl, rendezvous.ServerConfig{Secret: testSecret, Logger: logger})

	c, err := rendezvous.Dial(ctxFor(t, 30*time.Second), ln.Addr().String(), testSecret, nil)
	must.NoError(t, err)
	defer c.Close()
	_, ok, err := c.CompareAndSet(ctxFor(t, 30*time.Second), "k", []byte("v"), 0)
	must.NoError(t, err)
	must.True(t, ok)
	select {
	case <-done:
		t.Fatalf("Serve ended: %v", stop())
	default:
	}

	must.Eq(t, fails, strings.Count(logs.String(), "accept failed, retrying"), must.Sprint(logs.String()))
	must.StrContains(t, logs.String(), "too many open files")
	for _, d := range []string{"5ms", "10ms", "20ms", "40ms", "80ms", "160ms"} {
		must.StrContains(t, logs.String(), "retry_in="+d)
	}
	must.NoError(t, stop())
}

// An accept error that will not pass still ends Serve with it, and a
// server stopped while it backs off stops at once.
func TestServeAcceptErrors(t *testing.T) {
	cases := []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"permanent", errors.New("listener broke"), true},
		{"temporary, then stopped", &net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENFILE)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := rendezvous.NewMemStore(nil)
			t.Cleanup(func() { st.Close() })
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			must.NoError(t, err)
			fl := &failingListener{Listener: ln, err: c.err}
			fl.fails.Store(1 << 30)
			stop, done := startServer(t, st, fl, rendezvous.ServerConfig{})
			if c.wantErr {
				select {
				case <-done:
					must.ErrorContains(t, stop(), "listener broke")
				case <-time.After(30 * time.Second):
					t.Fatal("Serve did not end")
				}
				return
			}
			must.NoError(t, stop())
		})
	}
}

// floodConns is how many hostile connections TestGangFormsUnderFlood
// holds open; FLOOD_CONNS overrides it when measuring.
func floodConns() int {
	if n, err := strconv.Atoi(os.Getenv("FLOOD_CONNS")); err == nil && n > 0 {
		return n
	}
	return 300
}

// A flood of hostile connections against the embedded server during a
// rendezvous (connections that say nothing, connections that send garbage
// frames, clients with the wrong secret) does not keep the gang from
// forming: each costs the server one goroutine until its handshake fails
// or times out, and refusals are logged.
func TestGangFormsUnderFlood(t *testing.T) {
	const world = 4
	k := floodConns()
	st := rendezvous.NewMemStore(nil)
	t.Cleanup(func() { st.Close() })
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})
	addr := serveConfig(t, st, rendezvous.ServerConfig{Secret: testSecret, Logger: logger})

	// Open the flood first and hold it open while the gang joins.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range k {
		conn, err := net.Dial("tcp", addr)
		must.NoError(t, err, must.Sprintf("flood connection %d", i))
		held = append(held, conn)
		switch i % 3 {
		case 1: // garbage: a frame header claiming 4 GiB, then junk
			_, err = conn.Write(append([]byte{0xff, 0xff, 0xff, 0xff}, make([]byte, 60)...))
			must.NoError(t, err)
		case 2: // a would-be frame of the right shape with no proof
			_, err = conn.Write([]byte{0, 0, 0, 5, 'q', 1, 3, 'g', 'e'})
			must.NoError(t, err)
		}
	}
	// Wrong-secret clients keep coming while the gang joins.
	fctx, stopFlood := context.WithCancel(context.Background())
	var flooders sync.WaitGroup
	var refused atomic.Int64
	for range 4 {
		flooders.Add(1)
		go func() {
			defer flooders.Done()
			for fctx.Err() == nil {
				dctx, cancel := context.WithTimeout(fctx, 10*time.Second)
				c, err := rendezvous.Dial(dctx, addr, []byte("wrong secret"), nil)
				cancel()
				if err == nil {
					c.Close()
				} else {
					refused.Add(1)
				}
			}
		}()
	}

	start := time.Now()
	ctx := ctxFor(t, 60*time.Second)
	gens := make(chan uint64, world)
	errs := make(chan error, world)
	for i := range world {
		go func() {
			c, err := rendezvous.Dial(ctx, addr, testSecret, nil)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			s, err := rendezvous.Join(ctx, c, "flood", rendezvous.Member{
				ID: fmt.Sprintf("m%d", i), Node: "n", Addr: fmt.Sprintf("127.0.0.1:%d", 1000+i), RankHint: i,
			}, rendezvous.Fixed(world), rendezvous.Options{})
			if err != nil {
				errs <- err
				return
			}
			gens <- s.Assignment().Generation
			<-ctx.Done() // stay in the gang until the test ends
		}()
	}
	for range world {
		select {
		case g := <-gens:
			must.Eq(t, 1, g)
		case err := <-errs:
			t.Fatalf("join under flood: %v", err)
		}
	}
	formed := time.Since(start)
	stopFlood()
	flooders.Wait()
	t.Logf("gang of %d formed in %v with %d hostile connections held open and %d wrong-secret clients refused meanwhile",
		world, formed.Round(time.Millisecond), k, refused.Load())
	eventually(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "refused connection") },
		"refusals logged")
}
