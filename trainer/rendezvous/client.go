package rendezvous

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/internal/auth"
)

// Client is a Store reached over TCP from a Server. Calls share one
// connection and may run concurrently: each carries a request ID and a
// blocking Wait does not hold up the others. Leases granted through a Client
// are revoked by the server when the Client closes or its process dies.
type Client struct {
	conn   net.Conn
	logger hclog.Logger
	clock  Clock

	wmu    sync.Mutex // serializes frame writes
	queued []byte     // guarded by wmu: frames that go out with the next write

	done   chan struct{} // closed when the reading goroutine ends
	stop   chan struct{} // closed by Close
	closer sync.Once
	wg     sync.WaitGroup

	mu sync.Mutex
	// guarded by mu:
	nextID  uint64
	leases  uint64 // leases named so far
	pending map[uint64]chan response
	err     error // why the connection ended
}

// Dial connects to a Server at addr ("host:port") and, when secret is not
// empty, proves it holds the secret. logger may be nil.
func Dial(ctx context.Context, addr string, secret []byte, logger hclog.Logger) (*Client, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	// No TCP keep-alive: the client pings every pingInterval and both ends
	// time out a silent connection, and its socket options cost a connect
	// several system calls.
	d := net.Dialer{KeepAlive: -1}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial rendezvous store %s: %w", addr, err)
	}
	timeout := defaultHandshakeTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	proof, err := auth.Dial(conn, secret, timeout)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("authenticate to rendezvous store %s: %w", addr, err)
	}
	c := &Client{
		conn:    conn,
		queued:  proof, // goes out with the first request, or on its own soon
		logger:  logger.Named("rendezvous-client"),
		clock:   RealClock{},
		done:    make(chan struct{}),
		stop:    make(chan struct{}),
		pending: make(map[uint64]chan response),
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.pingLoop(proofDelay)
	return c, nil
}

// readLoop owns the connection's reads and hands each response to its caller.
func (c *Client) readLoop() {
	defer c.wg.Done()
	r := bufio.NewReader(c.conn)
	var err error
	for {
		if err = c.conn.SetReadDeadline(time.Now().Add(3 * pingInterval)); err != nil {
			break
		}
		var body []byte
		body, err = readFrame(r)
		if err != nil {
			break
		}
		var resp response
		resp, err = decodeResponse(body)
		if err != nil {
			break
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp // buffered, one response per request
		}
	}
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	c.conn.Close()
	close(c.done)
}

// proofDelay is how long the client's proof of the secret waits for a
// first request to ride with before it goes out alone (the server allows
// the handshake seconds).
const proofDelay = 50 * time.Millisecond

// pingLoop sends the proof of the secret if no request took it within
// proofDelay, and keeps the server from timing the connection out while
// the client has nothing to ask.
func (c *Client) pingLoop(proofDelay time.Duration) {
	defer c.wg.Done()
	proof := time.NewTimer(proofDelay)
	defer proof.Stop()
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-proof.C:
			if err := c.write(nil); err != nil {
				c.conn.Close()
			}
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), pingInterval)
			_, err := c.call(ctx, request{Op: opPing})
			cancel()
			if err != nil && !errors.Is(err, ErrClosed) {
				c.logger.Warn("ping failed, closing connection", "error", err)
				c.conn.Close()
			}
		case <-c.stop:
			return
		case <-c.done:
			return
		}
	}
}

func (c *Client) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return ErrClosed
	}
	return fmt.Errorf("%w: %v", ErrClosed, c.err)
}

// write sends frame, behind any frames queued before it, in one system call.
func (c *Client) write(frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(c.queued) > 0 {
		frame = append(c.queued, frame...)
		c.queued = nil
	}
	if len(frame) == 0 {
		return nil
	}
	if err := c.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	_, err := c.conn.Write(frame)
	return err
}

// queue holds frame back until the next write.
func (c *Client) queue(frame []byte) {
	c.wmu.Lock()
	c.queued = append(c.queued, frame...)
	c.wmu.Unlock()
}

// call sends req and waits for its response or for ctx.
func (c *Client) call(ctx context.Context, req request) (response, error) {
	p, err := c.send(ctx, req, false)
	if err != nil {
		return response{}, err
	}
	return p.await(ctx)
}

// pendingCall is a request sent and not yet answered.
type pendingCall struct {
	c  *Client
	id uint64
	ch chan response
}

// send writes req and returns without waiting for its answer. The server
// answers a connection's requests other than waits in the order they came,
// so a later request may depend on an earlier one still in flight. A
// request sent with later set is queued and goes out with the next one
// (or when its answer is awaited).
func (c *Client) send(ctx context.Context, req request, later bool) (pendingCall, error) {
	if err := ctx.Err(); err != nil {
		return pendingCall{}, err
	}
	ch := make(chan response, 1)
	c.mu.Lock()
	select {
	case <-c.done:
		c.mu.Unlock()
		return pendingCall{}, c.closedErr()
	default:
	}
	c.nextID++
	req.ID = c.nextID
	c.pending[req.ID] = ch
	c.mu.Unlock()

	frame, err := encodeFrame(req)
	if err == nil {
		if later {
			c.queue(frame)
		} else {
			err = c.write(frame)
		}
	}
	if err != nil {
		c.forget(req.ID)
		c.conn.Close()
		return pendingCall{}, fmt.Errorf("send %s request: %w", req.Op, err)
	}
	return pendingCall{c: c, id: req.ID, ch: ch}, nil
}

// await waits for p's response or for ctx; giving up cancels the request.
func (p pendingCall) await(ctx context.Context) (response, error) {
	if err := p.c.write(nil); err != nil { // p itself may still be queued
		p.c.conn.Close()
	}
	select {
	case resp := <-p.ch:
		return resp, resp.respErr()
	case <-ctx.Done():
		p.c.forget(p.id)
		if frame, err := encodeFrame(request{ID: p.id, Op: opCancel, Target: p.id}); err == nil {
			_ = p.c.write(frame) // best effort: the server also ends waits on its own
		}
		return response{}, ctx.Err()
	case <-p.c.done:
		return response{}, p.c.closedErr()
	}
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// Get implements Store.
func (c *Client) Get(ctx context.Context, key string) (Value, error) {
	resp, err := c.call(ctx, request{Op: opGet, Key: key})
	if err != nil {
		return Value{}, fmt.Errorf("get %s: %w", key, err)
	}
	return Value{Data: resp.Data, Version: resp.Version}, nil
}

// CompareAndSet implements Store.
func (c *Client) CompareAndSet(ctx context.Context, key string, data []byte, version uint64) (Value, bool, error) {
	resp, err := c.call(ctx, request{Op: opCAS, Key: key, Data: data, Version: version})
	if err != nil {
		return Value{}, false, fmt.Errorf("compare-and-set %s: %w", key, err)
	}
	if resp.OK {
		return Value{Data: data, Version: resp.Version}, true, nil
	}
	return Value{Data: resp.Data, Version: resp.Version}, false, nil
}

// Delete implements Store.
func (c *Client) Delete(ctx context.Context, key string) error {
	if _, err := c.call(ctx, request{Op: opDelete, Key: key}); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// wireWait is how long to ask the server to hold a wait: no longer than
// ctx allows, nor than maxWireWait.
func wireWait(ctx context.Context) int64 {
	d := maxWireWait
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d.Milliseconds(), 1)
}

// Wait implements Store.
func (c *Client) Wait(ctx context.Context, key string, after uint64) (Value, error) {
	for {
		resp, err := c.call(ctx, request{Op: opWait, Key: key, Version: after, WaitMs: wireWait(ctx)})
		if err != nil {
			return Value{}, fmt.Errorf("wait on %s: %w", key, err)
		}
		if resp.Version != after {
			return Value{Data: resp.Data, Version: resp.Version}, nil
		}
	}
}

// List implements Store.
func (c *Client) List(ctx context.Context, prefix string) ([]KeyValue, uint64, error) {
	resp, err := c.call(ctx, request{Op: opList, Key: prefix})
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", prefix, err)
	}
	return resp.KVs, resp.Index, nil
}

// WaitPrefix implements Store.
func (c *Client) WaitPrefix(ctx context.Context, prefix string, after uint64) ([]KeyValue, uint64, error) {
	for {
		resp, err := c.call(ctx, request{Op: opWaitPrefix, Key: prefix, Version: after, WaitMs: wireWait(ctx)})
		if err != nil {
			return nil, 0, fmt.Errorf("wait on prefix %s: %w", prefix, err)
		}
		if resp.Index != after {
			return resp.KVs, resp.Index, nil
		}
	}
}

// Grant implements Store. It does not wait for the server's answer, nor
// even send the request at once: the client names the lease, so the
// request that uses it (a join's transaction) carries the grant with it in
// one write and the server answers both in one, saving a round trip. A
// grant the server refused shows in the first call that uses the lease.
func (c *Client) Grant(ctx context.Context, ttl time.Duration) (Lease, error) {
	if ttl <= 0 || ttl > MaxLeaseTTL {
		return nil, fmt.Errorf("grant lease: ttl %v out of range", ttl)
	}
	ms := max(ttl.Milliseconds(), 1)
	c.mu.Lock()
	c.leases++
	name := fmt.Sprintf("lease-%d", c.leases)
	c.mu.Unlock()
	p, err := c.send(ctx, request{Op: opGrant, TTLms: ms, Lease: name}, true)
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	return &clientLease{c: c, id: name, ttl: time.Duration(ms) * time.Millisecond, grant: p}, nil
}

// PutEphemeral implements Store.
func (c *Client) PutEphemeral(ctx context.Context, lease Lease, key string, data []byte) error {
	if _, err := c.call(ctx, request{Op: opPutEphemeral, Key: key, Data: data, Lease: lease.ID()}); err != nil {
		return fmt.Errorf("put ephemeral %s: %w", key, grantErr(err, lease))
	}
	return nil
}

// Txn implements Store.
func (c *Client) Txn(ctx context.Context, ops []TxnOp) (TxnResult, error) {
	if err := CheckTxn(ops); err != nil {
		return TxnResult{}, err
	}
	req := request{Op: opTxn, Ops: make([]wireTxnOp, len(ops))}
	for i, op := range ops {
		req.Ops[i] = wireTxnOp{Kind: op.Kind, Key: op.Key, Data: op.Data, Version: op.Version}
		if op.Lease != nil {
			req.Ops[i].Lease = op.Lease.ID()
		}
	}
	resp, err := c.call(ctx, req)
	if err != nil {
		for _, op := range ops {
			if op.Lease != nil {
				err = grantErr(err, op.Lease)
			}
		}
		return TxnResult{}, fmt.Errorf("transaction: %w", err)
	}
	if !resp.OK {
		if resp.Failed < 0 || resp.Failed >= len(ops) {
			return TxnResult{}, fmt.Errorf("transaction: %w: failed op %d of %d", errFrame, resp.Failed, len(ops))
		}
		return TxnResult{Failed: resp.Failed, Current: Value{Data: resp.Data, Version: resp.Version}}, nil
	}
	return TxnResult{OK: true, Version: resp.Version, List: resp.KVs}, nil
}

// Close closes the connection; the server revokes this client's leases.
func (c *Client) Close() error {
	c.closer.Do(func() {
		close(c.stop)
		c.conn.Close()
	})
	c.wg.Wait()
	return nil
}

// clientLease is a lease held on the server through a Client.
type clientLease struct {
	c     *Client
	id    string
	ttl   time.Duration
	grant pendingCall // the grant request, answered or not

	once sync.Once
	err  error // the grant's outcome, once awaited
}

// granted waits for the grant's answer (once) and returns its error.
func (l *clientLease) granted(ctx context.Context) error {
	l.once.Do(func() {
		if _, err := l.grant.await(ctx); err != nil {
			l.err = fmt.Errorf("grant lease: %w", err)
		}
	})
	return l.err
}

// grantErr explains err, an error from a call that used lease, by the
// lease's failed grant when there was one. The server answers a
// connection's requests in order, so once a later request was refused for
// want of the lease, the grant's answer has come (or the connection ended).
func grantErr(err error, lease Lease) error {
	l, ok := lease.(*clientLease)
	if !ok || !errors.Is(err, ErrLeaseNotFound) {
		return err
	}
	if gerr := l.granted(context.Background()); gerr != nil {
		return gerr
	}
	return err
}

// ID implements Lease: a name local to the client's connection.
func (l *clientLease) ID() string { return l.id }

// TTL implements Lease.
func (l *clientLease) TTL() time.Duration { return l.ttl }

// Renew implements Lease.
func (l *clientLease) Renew(ctx context.Context) error {
	if err := l.granted(ctx); err != nil {
		return err
	}
	if _, err := l.c.call(ctx, request{Op: opRenew, Lease: l.id}); err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	return nil
}

// KeepAlive implements Lease.
func (l *clientLease) KeepAlive(ctx context.Context) error { return keepAlive(ctx, l.c.clock, l) }

// Revoke implements Lease.
func (l *clientLease) Revoke(ctx context.Context) error {
	if err := l.granted(ctx); err != nil {
		return err
	}
	if _, err := l.c.call(ctx, request{Op: opRevoke, Lease: l.id}); err != nil {
		return fmt.Errorf("revoke lease: %w", err)
	}
	return nil
}
