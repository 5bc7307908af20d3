package auth

import (
	"errors"
	"net"
	"testing"
	"time"
)

func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	return d, a
}

func TestHandshake(t *testing.T) {
	cases := []struct {
		name         string
		dial, accept string
		wantD, wantA bool // success
	}{
		{"same secret", "s3cret", "s3cret", true, true},
		{"different secrets", "s3cret", "other", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, a := pair(t)
			errs := make(chan error, 1)
			go func() { errs <- Handshake(a, []byte(tc.accept), Acceptor, 2*time.Second) }()
			errD := Handshake(d, []byte(tc.dial), Dialer, 2*time.Second)
			errA := <-errs
			if (errD == nil) != tc.wantD || (errA == nil) != tc.wantA {
				t.Fatalf("dialer err %v, acceptor err %v", errD, errA)
			}
			if !tc.wantA && !errors.Is(errA, ErrUnauthenticated) {
				t.Fatalf("acceptor error %v is not ErrUnauthenticated", errA)
			}
		})
	}
}

// A stranger who just connects and sends junk is refused within the timeout.
func TestStrangerRefused(t *testing.T) {
	d, a := pair(t)
	go d.Write(make([]byte, 64))
	start := time.Now()
	err := Handshake(a, []byte("s3cret"), Acceptor, 500*time.Millisecond)
	if !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("got %v, want ErrUnauthenticated", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("handshake did not respect its timeout")
	}
}

// A peer that connects and says nothing is cut off at the deadline.
func TestSilentStrangerTimesOut(t *testing.T) {
	_, a := pair(t)
	err := Handshake(a, []byte("s3cret"), Acceptor, 200*time.Millisecond)
	if err == nil {
		t.Fatal("handshake with a silent peer succeeded")
	}
}
