package rendezvous

import (
	"bufio"
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

// Timing defaults of the wire protocol.
const (
	defaultHandshakeTimeout = 5 * time.Second
	defaultIdleTimeout      = 30 * time.Second // three missed client pings
	pingInterval            = 10 * time.Second
	writeTimeout            = 10 * time.Second
	maxServerWait           = 10 * time.Minute // longest a server holds one wait
	maxWireWait             = time.Minute      // longest a client asks for
	maxWaitsPerConn         = 256              // waits one connection may hold at once
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Listener accepts the connections; the server closes it when Serve ends.
	Listener net.Listener
	// Secret, when not empty, is required of every connection through the
	// auth handshake; strangers are refused and logged.
	Secret []byte
	// Logger receives connection events (default: none).
	Logger hclog.Logger
	// HandshakeTimeout bounds the auth handshake (default 5s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that sent nothing, not even a ping,
	// for this long (default 30s). Clients ping every 10s, so it must be
	// well above that.
	IdleTimeout time.Duration
}

// Server serves a MemStore over TCP to Clients. Leases granted over a
// connection are revoked when that connection closes, so a killed worker's
// ephemeral keys vanish at once, not only at TTL expiry.
type Server struct {
	store     *MemStore
	ln        net.Listener
	secret    []byte
	logger    hclog.Logger
	handshake time.Duration
	idle      time.Duration

	wg sync.WaitGroup // connection goroutines

	mu sync.Mutex
	// guarded by mu:
	conns map[net.Conn]struct{}
}

// NewServer returns a server for store on cfg.Listener.
func NewServer(store *MemStore, cfg ServerConfig) (*Server, error) {
	if store == nil || cfg.Listener == nil {
		return nil, errors.New("new rendezvous server: store and listener are required")
	}
	s := &Server{
		store:     store,
		ln:        cfg.Listener,
		secret:    cfg.Secret,
		logger:    cfg.Logger,
		handshake: cfg.HandshakeTimeout,
		idle:      cfg.IdleTimeout,
		conns:     make(map[net.Conn]struct{}),
	}
	if s.logger == nil {
		s.logger = hclog.NewNullLogger()
	}
	s.logger = s.logger.Named("rendezvous-server")
	if s.handshake <= 0 {
		s.handshake = defaultHandshakeTimeout
	}
	if s.idle <= 0 {
		s.idle = defaultIdleTimeout
	}
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve accepts connections until ctx is done, then closes the listener and
// every connection and returns nil once they are all finished.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		s.ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	defer stop()
	var delay time.Duration // the wait after the last failed accept
	for {
		conn, err := s.ln.Accept()
		if err != nil && ctx.Err() == nil && temporaryAcceptError(err) {
			// Out of descriptors (a flood of connections, a low ulimit)
			// or a connection gone before it was accepted: the next
			// accept may well work, and the gang needs this server.
			delay = acceptBackoff(delay)
			s.logger.Warn("accept failed, retrying", "error", err, "retry_in", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		if err != nil {
			s.wg.Wait()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept rendezvous connection: %w", err)
		}
		delay = 0
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			conn.Close()
			continue
		}
		s.conns[conn] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(ctx, conn)
			s.mu.Lock()
			delete(s.conns, conn)
			s.mu.Unlock()
		}()
	}
}

// Accept retries back off from minAcceptDelay, doubling up to maxAcceptDelay.
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// acceptBackoff is the wait after a failed accept whose predecessor waited
// last (0 after a success).
func acceptBackoff(last time.Duration) time.Duration {
	if last <= 0 {
		return minAcceptDelay
	}
	return min(2*last, maxAcceptDelay)
}

// temporaryAcceptError reports whether an accept failed for a reason that
// may pass: too many open files in the process or the system, no buffer
// space or memory, a connection aborted before it was accepted, a timeout.
// A closed listener is for good.
func temporaryAcceptError(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// serverConn is one client connection. The reading goroutine owns reads
// and answers the quick requests itself; each wait runs in its own
// goroutine; writes are serialized by wmu.
type serverConn struct {
	s      *Server
	conn   net.Conn
	logger hclog.Logger

	wmu  sync.Mutex // serializes frame writes
	held []byte     // guarded by wmu: answers that go out with the next write

	mu sync.Mutex
	// guarded by mu:
	leases map[string]Lease
	ops    map[uint64]context.CancelFunc
}

func (s *Server) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	logger := s.logger.With("remote", conn.RemoteAddr().String())
	if err := auth.Handshake(conn, s.secret, auth.Acceptor, s.handshake); err != nil {
		logger.Warn("refused connection", "error", err)
		return
	}
	sc := &serverConn{
		s:      s,
		conn:   conn,
		logger: logger,
		leases: make(map[string]Lease),
		ops:    make(map[uint64]context.CancelFunc),
	}
	r := bufio.NewReader(conn)
	cctx, cancel := context.WithCancel(ctx)
	var ops sync.WaitGroup
	defer func() {
		cancel()
		conn.Close()
		ops.Wait()
		sc.revokeAll()
	}()
	for {
		if !frameBuffered(r) {
			sc.flush()
		}
		if err := conn.SetReadDeadline(time.Now().Add(s.idle)); err != nil {
			return
		}
		body, err := readFrame(r)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				logger.Debug("connection ended", "error", err)
			}
			return
		}
		req, err := decodeRequest(body)
		if err != nil {
			logger.Warn("closing connection after a bad request", "error", err)
			return
		}
		switch req.Op {
		case opCancel:
			sc.cancelOp(req.Target)
		case opPing:
			sc.send(response{ID: req.ID})
		case opGet, opCAS, opDelete, opList, opGrant, opPutEphemeral, opRenew, opRevoke, opTxn:
			// These never block on anything but the store's mutex: answer
			// them here, saving a goroutine hand-off per request. The
			// answer is held until the loop is about to block, so that
			// requests that came together are answered in one write.
			sc.hold(sc.handle(cctx, req))
		default: // waits run on their own so that they do not hold up the rest
			sc.mu.Lock()
			busy := len(sc.ops) >= maxWaitsPerConn
			sc.mu.Unlock()
			if busy {
				sc.send(response{ID: req.ID, Code: codeOther, Err: "too many waits on one connection"})
				continue
			}
			octx, ocancel := context.WithCancel(cctx)
			sc.mu.Lock()
			sc.ops[req.ID] = ocancel
			sc.mu.Unlock()
			ops.Add(1)
			go func() {
				defer ops.Done()
				defer ocancel()
				resp := sc.handle(octx, req)
				sc.cancelOp(req.ID)
				if cctx.Err() == nil {
					sc.send(resp)
				}
			}()
		}
	}
}

func (sc *serverConn) cancelOp(id uint64) {
	sc.mu.Lock()
	cancel := sc.ops[id]
	delete(sc.ops, id)
	sc.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// send writes one response, behind any held back; a failed write closes
// the connection, which ends the reading loop.
func (sc *serverConn) send(resp response) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.held = append(sc.held, encodeResponse(resp)...)
	sc.flushLocked()
}

// hold queues one response for the next write.
func (sc *serverConn) hold(resp response) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.held = append(sc.held, encodeResponse(resp)...)
}

// flush writes the responses held back, if any.
func (sc *serverConn) flush() {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.flushLocked()
}

func (sc *serverConn) flushLocked() {
	if len(sc.held) == 0 {
		return
	}
	frames := sc.held
	sc.held = nil
	if err := sc.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err == nil {
		if _, err = sc.conn.Write(frames); err == nil {
			return
		}
	}
	sc.conn.Close()
}

// encodeResponse encodes resp as a frame, or an error response in its place
// when it cannot be encoded.
func encodeResponse(resp response) []byte {
	frame, err := encodeFrame(resp)
	if err != nil {
		frame, _ = encodeFrame(response{ID: resp.ID, Code: codeOther, Err: err.Error()})
	}
	return frame
}

// revokeAll revokes the leases granted over this connection.
func (sc *serverConn) revokeAll() {
	sc.mu.Lock()
	leases := sc.leases
	sc.leases = nil
	sc.mu.Unlock()
	for id, l := range leases {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		err := l.Revoke(ctx)
		cancel()
		if err != nil && !errors.Is(err, ErrLeaseNotFound) && !errors.Is(err, ErrClosed) {
			sc.logger.Warn("revoke lease of closed connection", "lease", id, "error", err)
		} else if err == nil {
			sc.logger.Debug("revoked lease of closed connection", "lease", id)
		}
	}
}

func (sc *serverConn) lease(id string) (Lease, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	l, ok := sc.leases[id]
	if !ok {
		return nil, ErrLeaseNotFound
	}
	return l, nil
}

// handle runs one request against the store.
func (sc *serverConn) handle(ctx context.Context, req request) response {
	resp := response{ID: req.ID}
	fail := func(err error) response {
		return response{ID: req.ID, Code: errorCode(err), Err: err.Error()}
	}
	st := sc.s.store
	switch req.Op {
	case opGet:
		v, err := st.Get(ctx, req.Key)
		if err != nil {
			return fail(err)
		}
		resp.Data, resp.Version = v.Data, v.Version
	case opCAS:
		v, ok, err := st.CompareAndSet(ctx, req.Key, req.Data, req.Version)
		if err != nil {
			return fail(err)
		}
		resp.Version, resp.OK = v.Version, ok
		if !ok {
			resp.Data = v.Data // the winner's value; the client has its own
		}
	case opDelete:
		if err := st.Delete(ctx, req.Key); err != nil {
			return fail(err)
		}
	case opWait:
		wctx, cancel := waitContext(ctx, req.WaitMs)
		defer cancel()
		v, err := st.Wait(wctx, req.Key, req.Version)
		if err != nil && ctx.Err() == nil && wctx.Err() != nil {
			v, err = st.Get(ctx, req.Key) // held long enough: answer unchanged
		}
		if err != nil {
			return fail(err)
		}
		resp.Data, resp.Version = v.Data, v.Version
	case opList, opWaitPrefix:
		var kvs []KeyValue
		var idx uint64
		var err error
		if req.Op == opList {
			kvs, idx, err = st.List(ctx, req.Key)
		} else {
			wctx, cancel := waitContext(ctx, req.WaitMs)
			defer cancel()
			kvs, idx, err = st.WaitPrefix(wctx, req.Key, req.Version)
			if err != nil && ctx.Err() == nil && wctx.Err() != nil {
				kvs, idx, err = st.List(ctx, req.Key)
			}
		}
		if err != nil {
			return fail(err)
		}
		resp.KVs, resp.Index = kvs, idx
	case opGrant:
		l, err := st.Grant(ctx, time.Duration(req.TTLms)*time.Millisecond)
		if err != nil {
			return fail(err)
		}
		// A client may name the lease itself (a name local to this
		// connection), so that it can use the lease in its next requests
		// without waiting for this answer.
		name := req.Lease
		if name == "" {
			name = l.ID()
		}
		sc.mu.Lock()
		_, taken := sc.leases[name]
		if sc.leases == nil || taken { // connection closing, or a reused name
			sc.mu.Unlock()
			_ = l.Revoke(context.Background())
			if taken {
				return fail(fmt.Errorf("lease name %q is already in use on this connection", name))
			}
			return fail(ErrClosed)
		}
		sc.leases[name] = l
		sc.mu.Unlock()
		resp.Lease, resp.TTLms = name, l.TTL().Milliseconds()
	case opPutEphemeral:
		l, err := sc.lease(req.Lease)
		if err == nil {
			err = st.PutEphemeral(ctx, l, req.Key, req.Data)
		}
		if err != nil {
			return fail(err)
		}
	case opTxn:
		ops := make([]TxnOp, len(req.Ops))
		for i, o := range req.Ops {
			ops[i] = TxnOp{Kind: o.Kind, Key: o.Key, Data: o.Data, Version: o.Version}
			if o.Kind == TxnPutEphemeral {
				l, err := sc.lease(o.Lease)
				if err != nil {
					return fail(err)
				}
				ops[i].Lease = l
			}
		}
		r, err := st.Txn(ctx, ops)
		if err != nil {
			return fail(err)
		}
		resp.OK, resp.Version, resp.KVs = r.OK, r.Version, r.List
		if !r.OK {
			resp.Failed, resp.Data, resp.Version = r.Failed, r.Current.Data, r.Current.Version
		}
	case opRenew:
		l, err := sc.lease(req.Lease)
		if err == nil {
			err = l.Renew(ctx)
		}
		if err != nil {
			return fail(err)
		}
	case opRevoke:
		l, err := sc.lease(req.Lease)
		if err == nil {
			err = l.Revoke(ctx)
			sc.mu.Lock()
			delete(sc.leases, req.Lease)
			sc.mu.Unlock()
		}
		if err != nil {
			return fail(err)
		}
	default:
		return fail(fmt.Errorf("unsupported op %q", req.Op))
	}
	return resp
}

// waitContext bounds one server-side wait to what the client asked for, and
// never beyond maxServerWait.
func waitContext(ctx context.Context, waitMs int64) (context.Context, context.CancelFunc) {
	d := maxServerWait
	if waitMs > 0 && waitMs < d.Milliseconds() {
		d = time.Duration(waitMs) * time.Millisecond
	}
	return context.WithTimeout(ctx, d)
}
