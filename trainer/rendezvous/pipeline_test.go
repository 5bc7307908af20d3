package rendezvous

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// startServer serves a fresh MemStore on loopback with secret and a short
// handshake timeout, and returns its address.
func startServer(t *testing.T, secret []byte, handshake time.Duration) string {
	t.Helper()
	st := NewMemStore(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(st, ServerConfig{Listener: ln, Secret: secret, HandshakeTimeout: handshake})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		st.Close()
	})
	return srv.Addr()
}

// dialServer starts a server without a secret and dials it.
func dialServer(t *testing.T) (context.Context, *Client) {
	t.Helper()
	addr := startServer(t, nil, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	c, err := Dial(ctx, addr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return ctx, c
}

// A client that dials and then says nothing for longer than the server's
// handshake timeout is still admitted: its proof, held back to ride with
// the first request, goes out on its own soon after Dial.
func TestIdleClientSendsItsProof(t *testing.T) {
	secret := []byte("s3cret")
	addr := startServer(t, secret, 4*proofDelay)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(10 * proofDelay)
	if _, err := c.Get(ctx, "k"); err != nil {
		t.Fatalf("get after an idle start: %v", err)
	}
}

// The grant and the transaction that uses its lease go out in one write
// and are answered in order; the server's answers to requests that came
// together go back together.
func TestGrantRidesWithTheTransaction(t *testing.T) {
	ctx, c := dialServer(t)
	l, err := c.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c.queued == nil {
		t.Fatal("the grant went out on its own")
	}
	r, err := c.Txn(ctx, []TxnOp{
		{Kind: TxnPutEphemeral, Key: "a/1", Data: []byte("x"), Lease: l},
		{Kind: TxnList, Key: "a/"},
	})
	if err != nil || !r.OK || len(r.List) != 1 {
		t.Fatalf("txn with a pipelined lease: %+v, %v", r, err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := l.Revoke(ctx); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if kvs, _, err := c.List(ctx, "a/"); err != nil || len(kvs) != 0 {
		t.Fatalf("keys after revoke: %v, %v", kvs, err)
	}
}

// A lease name already in use on the connection is refused, and a call
// that used the refused lease reports the grant's error.
func TestRefusedGrantIsReported(t *testing.T) {
	ctx, c := dialServer(t)
	first, err := c.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.leases-- // the next grant reuses the first one's name
	c.mu.Unlock()
	second, err := c.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if first.ID() != second.ID() {
		t.Fatalf("names %q and %q differ", first.ID(), second.ID())
	}
	if err := first.Renew(ctx); err != nil {
		t.Fatalf("the first grant: %v", err)
	}
	err = second.Renew(ctx)
	if err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("renewing the refused lease: %v", err)
	}
	// grantErr turns a lease-not-found answer into the grant's reason.
	refused := &clientLease{c: c, id: "gone", grant: pendingCall{c: c, ch: make(chan response, 1)}}
	refused.grant.ch <- response{Code: codeOther, Err: "no more leases"}
	err = grantErr(ErrLeaseNotFound, refused)
	if err == nil || !strings.Contains(err.Error(), "grant lease") || !strings.Contains(err.Error(), "no more leases") {
		t.Fatalf("grantErr: %v", err)
	}
	if err := grantErr(errors.New("other"), refused); err.Error() != "other" {
		t.Fatalf("grantErr changed an unrelated error: %v", err)
	}
}
