package collective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// transportsOf returns every rank's "next/prev" transports.
func transportsOf(gs []*Group) []string {
	out := make([]string, len(gs))
	for r, g := range gs {
		next, prev := g.transports()
		out[r] = next + "/" + prev
	}
	return out
}

// exercise runs streamed and inline collectives on gs and checks them.
func exercise(t *testing.T, gs []*Group) {
	t.Helper()
	for _, length := range []int{0, 1, 1000, 100003} {
		for _, op := range []Op{Sum, Mean} {
			checkAllReduce(t, gs, length, op)
		}
	}
	checkBroadcastAllGatherBarrier(t, gs)
	// Blocks larger than a slot go over TCP, smaller ones through the
	// region, in one collective.
	block := func(r int) []byte { return bytes.Repeat([]byte{byte(r)}, []int{5000, 10, 70000}[r%3]) }
	outs := make([][][]byte, len(gs))
	noErrors(t, onAll(gs, func(r int, g *Group) error {
		var err error
		outs[r], err = g.AllGather(t.Context(), block(r))
		return err
	}))
	for r := range gs {
		for q := range gs {
			must.Eq(t, block(q), outs[r][q], must.Sprintf("rank %d block %d", r, q))
		}
	}
}

// The transport each connection ends up with, by what the two ends allow
// and can do. Results are checked against a naive sum either way.
func TestTransportChoice(t *testing.T) {
	const n = 3
	missing := filepath.Join(t.TempDir(), "missing")
	cases := []struct {
		name  string
		tweak func(r int, c *Config)
		want  []string
		log   string // a debug line some rank logs about the fallback
	}{
		{"same host", nil, []string{"shm/shm", "shm/shm", "shm/shm"}, ""},
		{"forced tcp", func(r int, c *Config) { c.Transport = TransportTCP }, []string{"tcp/tcp", "tcp/tcp", "tcp/tcp"}, ""},
		// Rank 1 alone turns it off: its two connections use TCP.
		{"one rank forced tcp", func(r int, c *Config) {
			if r == 1 {
				c.Transport = TransportTCP
			}
		}, []string{"tcp/shm", "tcp/tcp", "shm/tcp"}, ""},
		// Rank 1 says it runs elsewhere: never trust a shared address.
		{"peer claims another host", func(r int, c *Config) {
			if r == 1 {
				c.hostID = func() (string, error) { return "another-host", nil }
			}
		}, []string{"tcp/shm", "tcp/tcp", "shm/tcp"}, "peer is on another host, using TCP"},
		{"host identity unknown", func(r int, c *Config) {
			if r == 2 {
				c.hostID = func() (string, error) { return "", errors.New("no boot id") }
			}
		}, []string{"shm/tcp", "tcp/shm", "tcp/tcp"}, "host identity unknown, using TCP"},
		// Rank 0 cannot create its region: its connection to rank 1 falls
		// back to TCP, with no error.
		{"no shared directory", func(r int, c *Config) {
			if r == 0 {
				c.shmDir = missing
			}
		}, []string{"tcp/shm", "shm/tcp", "shm/shm"}, "shared memory unavailable, using TCP"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs logBuffer
			logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
			gs := gang(t, n, func(c *Config) {
				c.ChunkBytes = 4096
				c.shmDir = dir
				c.Logger = logger
				if tc.tweak != nil {
					tc.tweak(c.Rank, c)
				}
			})
			must.Eq(t, tc.want, transportsOf(gs))
			mustBeEmpty(t, dir)
			if tc.log != "" {
				must.StrContains(t, logs.String(), tc.log)
			}
			for _, g := range gs {
				g.inlineMax = 0 // stream everything through the transports
			}
			exercise(t, gs)
		})
	}
}

// The portable (explicit little-endian) path reads shared slots too.
func TestSharedMemoryPortable(t *testing.T) {
	gs := gang(t, 3, func(c *Config) { c.ChunkBytes = 4096 })
	for _, g := range gs {
		g.portable = true
		g.inlineMax = 0
	}
	must.Eq(t, []string{"shm/shm", "shm/shm", "shm/shm"}, transportsOf(gs))
	exercise(t, gs)
}

// Closing a group while another goroutine runs a collective on it ends
// that collective with an error, not a fault on an unmapped slot.
func TestCloseDuringSharedCollective(t *testing.T) {
	gs := gang(t, 2, func(c *Config) { c.ChunkBytes = 4096 })
	done := make(chan error, 1)
	go func() {
		buf := make([]float32, 1<<20)
		for {
			if err := gs[0].AllReduceFloat32(t.Context(), buf, Sum); err != nil {
				done <- err
				return
			}
		}
	}()
	go func() {
		buf := make([]float32, 1<<20)
		for gs[1].AllReduceFloat32(t.Context(), buf, Sum) == nil {
		}
	}()
	time.Sleep(100 * time.Millisecond)
	must.NoError(t, gs[0].Close())
	select {
	case err := <-done:
		must.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("collective did not end after Close")
	}
}

func TestShmInReleaseInOrder(t *testing.T) {
	in := newShmIn(make([]byte, regionBytes(4, 64)), 4, 64)
	for range 4 {
		_, _, err := in.take(10)
		must.NoError(t, err)
	}
	// Released 1, 2 before 0: no credit until 0 goes, then all three.
	for _, step := range []struct {
		msg   uint64
		freed uint64
		moved bool
	}{{1, 0, false}, {2, 0, false}, {0, 3, true}, {3, 4, true}} {
		freed, moved := in.release(step.msg)
		must.Eq(t, step.freed, freed, must.Sprintf("release %d", step.msg))
		must.Eq(t, step.moved, moved, must.Sprintf("release %d", step.msg))
	}
	_, _, err := in.take(65)
	must.Error(t, err)
	_, _, err = in.take(0)
	must.Error(t, err)
}

func TestShmOutCredits(t *testing.T) {
	out := newShmOut(make([]byte, regionBytes(2, 64)), 2, 64)
	must.False(t, out.full())
	out.posted.Add(2)
	must.True(t, out.full())
	must.Error(t, out.granted(3)) // more than was posted
	must.NoError(t, out.granted(1))
	must.False(t, out.full())
	must.Error(t, out.granted(0)) // backwards
	must.True(t, out.fits(64))
	must.False(t, out.fits(65))
	must.False(t, out.fits(0))
}

func TestOpenRegionRefuses(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "not-ours")
	must.NoError(t, os.WriteFile(foreign, make([]byte, regionBytes(1, 64)), 0o600))
	_, err := openRegion(foreign, regionBytes(1, 64))
	must.ErrorContains(t, err, "not one of ours")
	_, err = openRegion("relative/"+shmFilePrefix+"x", regionBytes(1, 64))
	must.ErrorContains(t, err, "not one of ours")

	mem, f, err := createRegion(dir, regionBytes(1, 64))
	must.NoError(t, err)
	defer f.Close()
	path := f.Name()
	defer unmap(mem)
	_, err = openRegion(path, regionBytes(2, 64)) // wrong size: mapping it would fault
	must.ErrorContains(t, err, "regular file of")
	theirs, err := openRegion(path, regionBytes(1, 64))
	must.NoError(t, err)
	defer unmap(theirs)
	writeRegionHeader(mem, [32]byte{1})
	must.NoError(t, checkRegion(theirs, [32]byte{1}, 1, 64))
	must.ErrorContains(t, checkRegion(theirs, [32]byte{2}, 1, 64), "nonce")
}

// A region that is not the one announced (another file of the same name,
// as in another mount namespace) is refused and the connection uses TCP;
// the announcing side removes its file either way.
func TestRegionNonceMismatchFallsBack(t *testing.T) {
	dir := t.TempDir()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	setup := func() *transportSetup {
		return &transportSetup{want: true, host: "h", dir: dir, slotBytes: 64, timeout: 5 * time.Second, log: hclog.NewNullLogger()}
	}
	type result struct {
		in  *shmIn
		err error
	}
	got := make(chan result, 1)
	go func() {
		in, err := setup().answer(b)
		got <- result{in, err}
	}()
	// A dialer that announces a region but the wrong nonce.
	must.NoError(t, sendMsg(a, transportMsg{Type: msgOffer, OK: true, Host: "h"}))
	ans, err := recvMsg(a, msgAnswer)
	must.NoError(t, err)
	must.True(t, ans.OK)
	mem, f, err := createRegion(dir, regionBytes(shmSlots, 64))
	must.NoError(t, err)
	defer f.Close()
	path := f.Name()
	defer unmap(mem)
	writeRegionHeader(mem, [32]byte{7})
	must.NoError(t, sendMsg(a, transportMsg{Type: msgRegion, OK: true, Slots: shmSlots, SlotBytes: 64, Nonce: [32]byte{8}, Path: path}))
	ack, err := recvMsg(a, msgAck)
	must.NoError(t, err)
	must.False(t, ack.OK)
	r := <-got
	must.NoError(t, r.err)
	must.Nil(t, r.in)
	must.NoError(t, os.Remove(path))

	// The real dialer against an acceptor that declines: no file is left.
	go func() {
		off, err := recvMsg(b, msgOffer)
		if err == nil {
			err = sendMsg(b, transportMsg{Type: msgAnswer, OK: false, Host: off.Host})
		}
		got <- result{err: err}
	}()
	out, err := setup().offer(a)
	must.NoError(t, err)
	must.Nil(t, out)
	must.NoError(t, (<-got).err)
	mustBeEmpty(t, dir)
}

func TestParseTransport(t *testing.T) {
	for in, want := range map[string]Transport{"": TransportAuto, "auto": TransportAuto, "shm": TransportAuto, " TCP ": TransportTCP} {
		got, err := ParseTransport(in)
		must.NoError(t, err, must.Sprintf("%q", in))
		must.Eq(t, want, got, must.Sprintf("%q", in))
	}
	_, err := ParseTransport("rdma")
	must.Error(t, err)
	_, err = New(t.Context(), Config{Rank: 0, Size: 1, Transport: Transport(7)})
	must.Error(t, err)
	must.Eq(t, "tcp", fmt.Sprint(TransportTCP))
}

// A ring connection that breaks during the transport agreement is a lost
// peer, whichever side notices first: the side cut short by our own close
// of both connections does not hide it behind "use of closed network
// connection".
func TestAgreementOnABrokenRingIsPeerLost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	defer ln.Close()
	pair := func() (net.Conn, net.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		must.NoError(t, err)
		a, err := ln.Accept()
		must.NoError(t, err)
		return c, a
	}
	next, nextPeer := pair()
	prev, prevPeer := pair()
	defer prevPeer.Close() // the previous rank lives, and waits
	nextPeer.Close()       // the next rank died
	s := &transportSetup{want: true, host: "h", dir: t.TempDir(), slotBytes: 64, timeout: 5 * time.Second, log: hclog.NewNullLogger()}
	_, _, err = s.agree(context.Background(), next, prev)
	must.ErrorIs(t, err, ErrPeerLost)
	must.StrNotContains(t, err.Error(), "closed network connection")
}

// A shared file whose process is gone (here: let go of, as a killed
// process's files are) is swept; one whose process lives stays, and so do
// files that are not shared regions of ours.
func TestSweepRegionsRemovesOnlyStaleOnes(t *testing.T) {
	dir := t.TempDir()
	_, live, err := createRegion(dir, regionBytes(1, 64))
	must.NoError(t, err)
	defer live.Close()
	mem, dead, err := createRegion(dir, regionBytes(1, 64))
	must.NoError(t, err)
	// Its owner is gone: nothing holds the lock (the mapping holds the
	// open file, and so the lock, as much as the descriptor does).
	must.NoError(t, unmap(mem))
	must.NoError(t, dead.Close())
	other := filepath.Join(dir, "nomad-train-secret")
	must.NoError(t, os.WriteFile(other, nil, 0o600))

	removed, err := SweepRegions(dir)
	must.NoError(t, err)
	must.Eq(t, []string{dead.Name()}, removed)
	_, err = os.Stat(live.Name())
	must.NoError(t, err)
	_, err = os.Stat(other)
	must.NoError(t, err)
	must.StrContains(t, filepath.Base(live.Name()), fmt.Sprintf("%s%d-", shmFilePrefix, os.Getpid()))
}
