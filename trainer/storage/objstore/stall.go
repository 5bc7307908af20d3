package objstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go/middleware"
)

// DefaultStallTimeout is Config.StallTimeout's zero value.
const DefaultStallTimeout = 30 * time.Second

// completeRate is the slowest pace, in bytes a second, at which a server
// is expected to assemble a multipart upload once asked to complete it.
// Some answer only when done and send nothing meanwhile (versitygw copies
// the parts into one file; AWS S3 and MinIO send spaces to keep the
// connection busy), so the completion's stall allowance grows with the
// upload: 32 s more for 256 MiB.
const completeRate = 8 << 20

// completeAllowance is how long a completion of size bytes may go
// without a byte moving.
func completeAllowance(stall time.Duration, size int64) time.Duration {
	return stall + time.Duration(size/completeRate)*time.Second
}

// workingOn gives a request on which the server works on size bytes
// without a word (a multipart completion, a copy) the allowance of
// completeAllowance.
func (s *Store) workingOn(ctx context.Context, size int64) context.Context {
	if s.cfg.StallTimeout <= 0 {
		return ctx
	}
	return WithStallAllowance(ctx, completeAllowance(s.cfg.StallTimeout, size))
}

// ErrStalled is returned (wrapped) by a request whose connection moved no
// byte either way for its allowance.
var ErrStalled = errors.New("connection stalled")

// stallError is a stalled read or write; the SDK retries it as a timeout.
type stallError struct{ allow time.Duration }

func (e *stallError) Error() string {
	return fmt.Sprintf("%v: no byte to or from the server for %v", ErrStalled, e.allow)
}
func (e *stallError) Is(target error) bool { return target == ErrStalled }
func (e *stallError) Timeout() bool        { return true }
func (e *stallError) Temporary() bool      { return true }

// stallWriteChunk bounds one write to the connection, so that the
// deadline measures the time between bytes moving, not the time to send
// a whole part.
const stallWriteChunk = 256 << 10

// stallConn is a connection whose reads and writes fail once no byte has
// moved either way for its allowance. Every read and write pushes one
// deadline for both directions: bytes sent start the wait for the answer,
// bytes received show that the server lives. (The SDK's own read timeout
// deadlines reads alone, from when each read began: the transport's read
// of an idle pooled connection starts that clock early, so a request sent
// on a connection idle for nearly the allowance would fail at once, and a
// write to a server that stopped reading would never fail.)
//
// An idle pooled connection is closed after the allowance, which only
// costs the next request a new connection.
type stallConn struct {
	net.Conn
	base  time.Duration // the allowance of a request that asks for none
	allow atomic.Int64  // the current request's allowance, a time.Duration
	armed atomic.Int64  // when the deadline was last pushed, in Unix ns
}

func newStallConn(c net.Conn, allow time.Duration) *stallConn {
	s := &stallConn{Conn: c, base: allow}
	s.allow.Store(int64(allow))
	return s
}

// arm pushes the deadline to now + the allowance; to keep the cost of a
// fast transfer low it skips doing so when it did within an eighth of
// the allowance, so a stall is noticed after 7/8 to 8/8 of it.
func (c *stallConn) arm(force bool) {
	allow := time.Duration(c.allow.Load())
	now := time.Now()
	if !force && now.UnixNano()-c.armed.Load() < int64(allow/8) {
		return
	}
	c.armed.Store(now.UnixNano())
	_ = c.Conn.SetDeadline(now.Add(allow))
}

// setAllowance sets the allowance of the request about to use the
// connection (zero: the base) and pushes the deadline at once, past
// where an idle read of the transport had set it.
func (c *stallConn) setAllowance(d time.Duration) {
	if d <= 0 {
		d = c.base
	}
	c.allow.Store(int64(d))
	c.arm(true)
}

func (c *stallConn) Read(p []byte) (int, error) {
	c.arm(false)
	n, err := c.Conn.Read(p)
	return n, c.stalled(err)
}

func (c *stallConn) Write(p []byte) (int, error) {
	var n int
	for len(p) > 0 {
		c.arm(false)
		k := min(len(p), stallWriteChunk)
		m, err := c.Conn.Write(p[:k])
		n += m
		if err != nil {
			return n, c.stalled(err)
		}
		p = p[k:]
	}
	return n, nil
}

func (c *stallConn) stalled(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &stallError{allow: time.Duration(c.allow.Load())}
	}
	return err
}

// stallHTTPClient is the configuration's HTTP client (the SDK's default,
// with AWS_CA_BUNDLE's roots when set), its connections failing after
// stall without a byte moving. A client of another kind, set by the
// caller, is kept as it is.
//
// It speaks HTTP/1.1 only, as S3 itself does: a connection then carries
// one request at a time, whose allowance is the connection's. Over
// HTTP/2, which a server behind TLS may offer (MinIO does), the parts of
// an upload would share one connection and the last request to start
// would set the allowance of all: a lease's short one would cut a
// multipart completion that the server answers after a silent while.
// Separate connections also carry parallel parts faster over a long path
// than one multiplexed connection does.
func stallHTTPClient(base aws.HTTPClient, stall time.Duration) aws.HTTPClient {
	bc, ok := base.(*awshttp.BuildableClient)
	if base == nil {
		bc, ok = awshttp.NewBuildableClient(), true
	}
	if !ok {
		return base
	}
	return bc.WithTransportOptions(func(tr *http.Transport) {
		var only11 http.Protocols
		only11.SetHTTP1(true)
		tr.Protocols = &only11
		if tc := tr.TLSClientConfig; tc != nil {
			// Cloning a transport that attempts HTTP/2 (as the SDK's
			// WithTransportOptions does) puts h2 in its TLS ALPN list: a
			// server would then answer in HTTP/2 to a transport that no
			// longer speaks it.
			tc = tc.Clone()
			tc.NextProtos = slices.DeleteFunc(slices.Clone(tc.NextProtos), func(p string) bool { return p == "h2" })
			tr.TLSClientConfig = tc
		}
		dial := tr.DialContext
		if dial == nil {
			dial = (&net.Dialer{Timeout: awshttp.DefaultDialConnectTimeout,
				KeepAlive: awshttp.DefaultDialKeepAliveTimeout}).DialContext
		}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return newStallConn(c, stall), nil
		}
	})
}

// allowanceKey carries a request's own stall allowance in its context.
type allowanceKey struct{}

// WithStallAllowance gives the requests made with ctx a stall allowance
// of d in place of Config.StallTimeout, on a store made by Open: shorter
// for small requests that something waits on (a lease's renewal), longer
// for one the server may work on without a word.
func WithStallAllowance(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, allowanceKey{}, d)
}

// startKey carries when an operation began, for retryUntil.
type startKey struct{}

// requestClock is the client option (APIOptions) that notes when each
// operation begins (for Config.RetryFor's bound on time) and gives the
// connection each of its attempts gets the operation's stall allowance.
func requestClock(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("nomadTrainRequestClock",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
			middleware.InitializeOutput, middleware.Metadata, error) {
			ctx = context.WithValue(ctx, startKey{}, time.Now())
			allow, _ := ctx.Value(allowanceKey{}).(time.Duration)
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
				GotConn: func(info httptrace.GotConnInfo) {
					if c := asStallConn(info.Conn); c != nil {
						c.setAllowance(allow)
					}
				},
			})
			out, md, err := next.HandleInitialize(ctx, in)
			var retried *retriedError
			if errors.As(err, &retried) {
				err = retried
			}
			return out, md, err
		}), middleware.After)
}

// asStallConn finds the stallConn under a connection (beneath TLS too).
func asStallConn(c net.Conn) *stallConn {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = tc.NetConn()
	}
	s, _ := c.(*stallConn)
	return s
}
