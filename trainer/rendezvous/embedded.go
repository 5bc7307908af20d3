package rendezvous

import (
	"context"
	"fmt"
	"net"

	"github.com/hashicorp/go-hclog"
)

// Embedded is the embedded store as a launcher runs it: a MemStore served
// over TCP for the lifetime of a run.
type Embedded struct {
	// Store is the served store; the launcher may use it directly.
	Store *MemStore
	// URI is what workers pass to Open ("embedded://host:port").
	URI string

	server *Server
	cancel context.CancelFunc
	done   chan error
}

// StartEmbedded listens on listenAddr ("127.0.0.1:0" for a free loopback
// port) and serves a new MemStore there, requiring secret of every
// connection, until Close or until ctx is done.
func StartEmbedded(ctx context.Context, listenAddr string, secret []byte, logger hclog.Logger) (*Embedded, error) {
	lc := net.ListenConfig{KeepAlive: -1} // the protocol pings; see Dial
	ln, err := lc.Listen(ctx, "tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("start embedded rendezvous store: %w", err)
	}
	st := NewMemStore(nil)
	srv, err := NewServer(st, ServerConfig{Listener: ln, Secret: secret, Logger: logger})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("start embedded rendezvous store: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	e := &Embedded{Store: st, URI: "embedded://" + srv.Addr(), server: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- srv.Serve(sctx) }()
	return e, nil
}

// Close stops serving, closes every connection (revoking their leases) and
// closes the store.
func (e *Embedded) Close() error {
	e.cancel()
	err := <-e.done
	e.done <- err // a second Close returns the same
	e.Store.Close()
	if err != nil {
		return fmt.Errorf("serve embedded rendezvous store: %w", err)
	}
	return nil
}
