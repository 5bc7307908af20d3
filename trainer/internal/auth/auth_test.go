package auth

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// Dial checks the acceptor before it returns and leaves its own proof to
// the caller: the acceptor admits the dialer only once the proof arrives,
// whatever follows it in the same write.
func TestDialDefersProof(t *testing.T) {
	d, a := pair(t)
	errs := make(chan error, 1)
	go func() { errs <- Handshake(a, []byte("s3cret"), Acceptor, 2*time.Second) }()
	proof, err := Dial(d, []byte("s3cret"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatalf("acceptor finished (%v) before the dialer's proof was sent", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := d.Write(append(proof, "hello"...)); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("acceptor refused a good proof: %v", err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(a, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("bytes after the proof: %q, %v", buf, err)
	}
}

// A dialer with the wrong secret learns it from the acceptor's proof, and
// the acceptor, never getting a proof, refuses it.
func TestDialWrongSecret(t *testing.T) {
	d, a := pair(t)
	errs := make(chan error, 1)
	go func() { errs <- Handshake(a, []byte("s3cret"), Acceptor, 2*time.Second) }()
	proof, err := Dial(d, []byte("other"), 2*time.Second)
	if !errors.Is(err, ErrUnauthenticated) || proof != nil {
		t.Fatalf("dial with the wrong secret: proof %x, err %v", proof, err)
	}
	d.Close()
	if err := <-errs; !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("acceptor error %v is not ErrUnauthenticated", err)
	}
}

func TestReadSecretFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadSecretFile(path); err != nil || string(got) != "s3cret" {
		t.Fatalf("got %q, %v", got, err)
	}
	if got, err := ReadSecretFile(""); err != nil || got != nil {
		t.Fatalf("empty path: got %q, %v", got, err)
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSecretFile(path); err == nil {
		t.Fatal("an empty secret file was accepted")
	}
}

// A secret inherited as a descriptor is not passed on to the reader's own
// children.
func TestReadSecretFileFromDescriptor(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "secret")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("s3cret"); err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil { // as inherited
		t.Fatal(err)
	}
	got, err := ReadSecretFile(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil || string(got) != "s3cret" {
		t.Fatalf("got %q, %v", got, err)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		t.Fatal(err)
	}
	if flags&unix.FD_CLOEXEC == 0 {
		t.Fatal("the descriptor would be inherited by the reader's children")
	}
}
