package collective

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nomad-train/nomad-train/trainer/internal/auth"
)

// socketBuffer is the kernel send/receive buffer asked for on ring sockets:
// large enough that a chunk or two is in flight while the other side reduces.
const socketBuffer = 4 << 20

// tune sets the socket options the ring wants. Failures only cost speed.
func tune(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(true)
	_ = tc.SetReadBuffer(socketBuffer)
	_ = tc.SetWriteBuffer(socketBuffer)
}

// connector forms the two ring connections of one rank.
type connector struct {
	cfg  Config
	log  hclog.Logger
	me   hello
	prev int // rank we accept from
	next int // rank we dial
}

// exchangeHello sends ours and reads theirs within the timeout.
func (c *connector) exchangeHello(conn net.Conn, sendFirst bool) (hello, error) {
	if err := conn.SetDeadline(time.Now().Add(c.cfg.Timeout)); err != nil {
		return hello{}, fmt.Errorf("set hello deadline: %w", err)
	}
	defer conn.SetDeadline(time.Time{})
	mine := c.me.encode()
	if sendFirst {
		if _, err := conn.Write(mine[:]); err != nil {
			return hello{}, fmt.Errorf("send hello: %w", err)
		}
	}
	var b [helloSize]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		if sendFirst && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			// The acceptor hangs up on a hello it does not want.
			return hello{}, fmt.Errorf("%w: peer hung up after our hello (generation %d, size %d, rank %d): %v",
				ErrRefused, c.me.Generation, c.me.Size, c.me.Rank, err)
		}
		return hello{}, fmt.Errorf("read hello: %w", err)
	}
	theirs, err := decodeHello(b[:])
	if err != nil {
		return hello{}, err
	}
	if !sendFirst {
		// The acceptor checks before answering, so a refused dialer learns
		// nothing about the gang.
		if err := c.check(theirs, c.prev); err != nil {
			return theirs, err
		}
		if _, err := conn.Write(mine[:]); err != nil {
			return hello{}, fmt.Errorf("send hello: %w", err)
		}
	}
	return theirs, nil
}

// check compares a peer's hello with what the ring expects from rank want.
func (c *connector) check(h hello, want int) error {
	switch {
	case h.Generation != c.me.Generation:
		return fmt.Errorf("%w: peer is in generation %d, we are in %d", ErrRefused, h.Generation, c.me.Generation)
	case h.Size != c.me.Size:
		return fmt.Errorf("%w: peer has gang size %d, we have %d", ErrRefused, h.Size, c.me.Size)
	case h.Rank != want:
		return fmt.Errorf("%w: peer is rank %d, want rank %d", ErrRefused, h.Rank, want)
	case h.ChunkBytes != c.me.ChunkBytes:
		return fmt.Errorf("%w: peer uses %d-byte chunks, we use %d", ErrRefused, h.ChunkBytes, c.me.ChunkBytes)
	}
	return nil
}

// dialNext connects to rank next, retrying refused dials until ctx ends
// (a peer's listener may come up a little after the rendezvous says so).
// A peer that fails authentication or the hello is an error at once.
func (c *connector) dialNext(ctx context.Context) (net.Conn, error) {
	addr := c.cfg.Peers[c.next]
	backoff := 20 * time.Millisecond
	for {
		dctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		conn, err := c.cfg.Dialer(dctx, "tcp", addr)
		cancel()
		if err == nil {
			tune(conn)
			if err := auth.Handshake(conn, c.cfg.Secret, auth.Dialer, c.cfg.Timeout); err != nil {
				conn.Close()
				return nil, fmt.Errorf("authenticate to rank %d at %s: %w", c.next, addr, err)
			}
			h, err := c.exchangeHello(conn, true)
			if err == nil {
				err = c.check(h, c.next)
			}
			if err != nil {
				conn.Close()
				return nil, fmt.Errorf("greet rank %d at %s: %w", c.next, addr, err)
			}
			return conn, nil
		}
		c.log.Debug("dial failed, retrying", "peer", c.next, "addr", addr, "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial rank %d at %s: %w (last error: %v)", c.next, addr, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// acceptor accepts on the listener until closed, authenticating each
// connection in its own goroutine; the first one that proves to be rank
// prev of our generation is delivered on got, every other one is closed
// and logged.
type acceptor struct {
	c   *connector
	ln  net.Listener
	got chan net.Conn // capacity 1
	wg  sync.WaitGroup

	mu       sync.Mutex
	pending  map[net.Conn]struct{} // connections still being checked
	closed   bool
	accepted bool // a connection went to got
}

func (c *connector) startAccepting(ln net.Listener) *acceptor {
	a := &acceptor{c: c, ln: ln, got: make(chan net.Conn, 1), pending: map[net.Conn]struct{}{}}
	a.wg.Add(1)
	go a.loop()
	return a
}

func (a *acceptor) loop() {
	defer a.wg.Done()
	for {
		conn, err := a.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				a.c.log.Debug("accept stopped", "error", err)
			}
			return
		}
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			conn.Close()
			return
		}
		a.pending[conn] = struct{}{}
		a.wg.Add(1)
		a.mu.Unlock()
		go a.vet(conn)
	}
}

func (a *acceptor) vet(conn net.Conn) {
	defer a.wg.Done()
	err := a.admit(conn)
	a.mu.Lock()
	delete(a.pending, conn)
	if err == nil && (a.accepted || a.closed) {
		err = fmt.Errorf("%w: ring connection from rank %d already made", ErrRefused, a.c.prev)
	}
	if err == nil {
		a.accepted = true
		a.got <- conn
	}
	a.mu.Unlock()
	if err != nil {
		conn.Close()
		a.c.log.Warn("refused connection", "remote", conn.RemoteAddr().String(), "error", err)
	}
}

func (a *acceptor) admit(conn net.Conn) error {
	tune(conn)
	if err := auth.Handshake(conn, a.c.cfg.Secret, auth.Acceptor, a.c.cfg.Timeout); err != nil {
		return fmt.Errorf("authenticate: %w", err)
	}
	if _, err := a.c.exchangeHello(conn, false); err != nil {
		return fmt.Errorf("greet: %w", err)
	}
	return nil
}

// stop closes the listener and every connection still being checked, and
// waits for the goroutines. A delivered connection stays open.
func (a *acceptor) stop() {
	a.mu.Lock()
	a.closed = true
	for conn := range a.pending {
		conn.Close()
	}
	a.mu.Unlock()
	a.ln.Close()
	a.wg.Wait()
}

// wait returns the connection from rank prev, or an error when ctx ends.
func (a *acceptor) wait(ctx context.Context) (net.Conn, error) {
	select {
	case conn := <-a.got:
		return conn, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for rank %d to connect: %w", a.c.prev, ctx.Err())
	}
}

// links are one rank's two ring connections and, where the neighbour is on
// the same host, the shared regions that carry their bulk data.
type links struct {
	next, prev net.Conn
	out        *shmOut // to next; nil: payloads go over TCP
	in         *shmIn  // from prev; nil: payloads come over TCP
}

// connect forms the ring for cfg: it dials rank+1 and accepts rank-1 at
// the same time, then agrees with both on a transport. The listener is
// closed on return.
func connect(ctx context.Context, cfg Config, log hclog.Logger) (links, error) {
	next, prev, err := dialAndAccept(ctx, cfg, log)
	if err != nil {
		return links{}, err
	}
	setup := &transportSetup{
		want:      cfg.Transport == TransportAuto,
		dir:       cfg.shmDir,
		slotBytes: slotSize(cfg.ChunkBytes),
		timeout:   cfg.Timeout,
		log:       log,
	}
	if setup.dir == "" {
		setup.dir = defaultShmDir()
	}
	if setup.want {
		sweepOnce(setup.dir, log)
		hostID := cfg.hostID
		if hostID == nil {
			hostID = hostIdentity
		}
		if setup.host, err = hostID(); err != nil {
			log.Debug("host identity unknown, using TCP", "error", err)
			setup.want = false
		}
	}
	out, in, err := setup.agree(ctx, next, prev)
	if err != nil {
		next.Close()
		prev.Close()
		return links{}, err
	}
	return links{next: next, prev: prev, out: out, in: in}, nil
}

// swept holds the shared-memory directories this process has swept.
var swept sync.Map

// sweepOnce removes, once per process and directory, the shared files that
// processes now gone left in dir (a worker killed while it set up a ring):
// on a host where the launcher does not sweep (Nomad), the workers do.
func sweepOnce(dir string, log hclog.Logger) {
	if _, done := swept.LoadOrStore(dir, true); done {
		return
	}
	removed, err := SweepRegions(dir)
	if len(removed) > 0 {
		log.Info("removed shared files of processes now gone", "dir", dir, "count", len(removed))
	}
	if err != nil {
		log.Warn("cannot sweep shared files", "error", err)
	}
}

// dialAndAccept dials rank+1 and accepts rank-1 at the same time, and
// returns both connections (next, prev). The listener is closed on return.
func dialAndAccept(ctx context.Context, cfg Config, log hclog.Logger) (next, prev net.Conn, err error) {
	c := &connector{
		cfg:  cfg,
		log:  log,
		me:   hello{Rank: cfg.Rank, Size: cfg.Size, Generation: cfg.Generation, ChunkBytes: cfg.ChunkBytes},
		prev: mod(cfg.Rank-1, cfg.Size),
		next: mod(cfg.Rank+1, cfg.Size),
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	acc := c.startAccepting(cfg.Listener)
	next, err = c.dialNext(ctx)
	if err == nil {
		prev, err = acc.wait(ctx)
	}
	acc.stop()
	if err != nil {
		if next != nil {
			next.Close()
		}
		// A connection delivered after we gave up must not leak.
		select {
		case p := <-acc.got:
			p.Close()
		default:
		}
		return nil, nil, err
	}
	return next, prev, nil
}
