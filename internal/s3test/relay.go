package s3test

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Relay forwards TCP connections to a server and can fall silent, as a
// server lost behind a load balancer or a network that drops packets
// looks to a client: nothing is refused or reset, nothing answers.
type Relay struct {
	// Endpoint is the relay's base URL, http://127.0.0.1:<port>.
	Endpoint string

	target string
	ln     net.Listener
	cut    atomic.Bool
	moved  atomic.Int64 // bytes forwarded, both ways
	rate   atomic.Int64 // bytes per second each way of each connection; 0 unlimited
	conned atomic.Int64 // connections taken
	mu     sync.Mutex
	conns  []*relayConn // every connection taken, for Cut and the clean-up
}

type relayConn struct {
	client, server net.Conn // server is nil for one taken during a cut
	dead           atomic.Bool
	moved          *atomic.Int64
	rate           *atomic.Int64
}

// NewRelay starts a relay to the server at endpoint (http://host:port),
// stopped at the test's end.
func NewRelay(t testing.TB, endpoint string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("s3test: relay: %v", err)
	}
	r := &Relay{Endpoint: "http://" + ln.Addr().String(), target: strings.TrimPrefix(endpoint, "http://"), ln: ln}
	go r.accept()
	t.Cleanup(r.close)
	return r
}

// Cut silences the relay: every open connection stops carrying bytes
// for good, its end left open; connections made until Mend are taken and
// never answered.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut.Store(true)
	for _, c := range r.conns {
		c.dead.Store(true)
	}
}

// Mend forwards new connections again, as when traffic goes to a server
// that works; those silenced by Cut stay so.
func (r *Relay) Mend() { r.cut.Store(false) }

// LimitEach paces every connection, each way, to bytesPerSecond (0: no
// limit), as S3 serves each connection at a rate of its own: what a
// client gains by spreading a transfer over connections shows here.
func (r *Relay) LimitEach(bytesPerSecond int64) { r.rate.Store(bytesPerSecond) }

// Conns is how many connections the relay has taken.
func (r *Relay) Conns() int64 { return r.conned.Load() }

// Moved is how many bytes the relay has forwarded, both ways together:
// what a client sent and received through it.
func (r *Relay) Moved() int64 { return r.moved.Load() }

func (r *Relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.conned.Add(1)
		rc := &relayConn{client: c, moved: &r.moved, rate: &r.rate}
		if r.cut.Load() {
			rc.dead.Store(true)
		} else if rc.server, err = net.Dial("tcp", r.target); err != nil {
			_ = c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, rc)
		r.mu.Unlock()
		if rc.server != nil {
			go rc.pipe(rc.server, rc.client)
			go rc.pipe(rc.client, rc.server)
		}
	}
}

// pipe copies from src to dst until either fails or the connection is
// silenced; then it stops reading, leaving both ends open.
func (rc *relayConn) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	var due time.Time // when the bytes sent so far are due, under a limit
	for {
		n, err := src.Read(buf)
		if rc.dead.Load() {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
			rc.moved.Add(int64(n))
			if rate := rc.rate.Load(); rate > 0 {
				// Sleeps that overran are made up within 20 ms; the
				// time a connection was idle is no credit.
				if now := time.Now(); now.Sub(due) > 20*time.Millisecond {
					due = now
				}
				due = due.Add(time.Duration(int64(n) * int64(time.Second) / rate))
				time.Sleep(time.Until(due))
			}
		}
		if err != nil {
			if err == io.EOF {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
}

func (r *Relay) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.client.Close()
		if c.server != nil {
			_ = c.server.Close()
		}
	}
}
