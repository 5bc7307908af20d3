//go:build linux

package rendezvous_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

const envEMFILEChild = "RDZV_WANT_EMFILE_SERVER"

// TestEMFILEServerChild is the body of TestServerOutlivesEMFILE's child: a
// server with few descriptors to spare. It does nothing in a normal run.
func TestEMFILEServerChild(t *testing.T) {
	if os.Getenv(envEMFILEChild) != "1" {
		t.Skip("helper process for TestServerOutlivesEMFILE")
	}
	st := rendezvous.NewMemStore(nil)
	defer st.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	logger := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Warn})
	srv, err := rendezvous.NewServer(st, rendezvous.ServerConfig{Listener: ln, Secret: testSecret, Logger: logger,
		HandshakeTimeout: 300 * time.Millisecond})
	must.NoError(t, err)
	// Room for about ten more descriptors than are open now.
	entries, err := os.ReadDir("/proc/self/fd")
	must.NoError(t, err)
	limit := uint64(len(entries) + 10)
	must.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: limit}))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }() // serve until the parent closes stdin
	os.Stdout.WriteString(ln.Addr().String() + "\n")
	must.NoError(t, srv.Serve(ctx))
}

// A flood of connections that exhausts the server's descriptors (EMFILE on
// accept) used to end Serve for good: every later join of the run failed.
// The server now logs it, backs off and accepts again once descriptors are
// free, and a worker with the secret gets through.
func TestServerOutlivesEMFILE(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestEMFILEServerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envEMFILEChild+"=1")
	stdin, err := cmd.StdinPipe()
	must.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	must.NoError(t, err)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	must.NoError(t, err, must.Sprint(stderr.String()))
	addr := strings.TrimSpace(line)

	// Silent connections, more than the server has descriptors for.
	var flood []net.Conn
	for range 40 {
		c, err := net.Dial("tcp", addr)
		must.NoError(t, err)
		flood = append(flood, c)
	}
	eventually(t, 30*time.Second, func() bool { return strings.Contains(stderr.String(), "too many open files") },
		"the server ran out of descriptors")
	for _, c := range flood {
		c.Close()
	}

	c, err := rendezvous.Dial(ctxFor(t, 30*time.Second), addr, testSecret, nil)
	must.NoError(t, err, must.Sprint(stderr.String()))
	defer c.Close()
	_, ok, err := c.CompareAndSet(ctxFor(t, 30*time.Second), "after-the-flood", []byte("v"), 0)
	must.NoError(t, err, must.Sprint(stderr.String()))
	must.True(t, ok)
	must.StrContains(t, stderr.String(), "accept failed, retrying")
}
