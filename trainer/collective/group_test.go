package collective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nomad-train/nomad-train/trainer/internal/auth"
	"github.com/shoenig/test/must"
)

// listeners opens n loopback listeners and returns them with their addresses.
func listeners(t *testing.T, n int) ([]net.Listener, []string) {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must.NoError(t, err)
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	return lns, addrs
}

// gang forms n groups in this process over real loopback TCP. tweak may
// adjust each rank's Config.
func gang(t *testing.T, n int, tweak func(*Config)) []*Group {
	t.Helper()
	lns, addrs := listeners(t, n)
	gs := make([]*Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cfg := Config{Rank: r, Size: n, Listener: lns[r], Peers: addrs, Timeout: 5 * time.Second}
		if tweak != nil {
			tweak(&cfg)
		}
		wg.Go(func() { gs[r], errs[r] = New(t.Context(), cfg) })
	}
	wg.Wait()
	for r := range n {
		must.NoError(t, errs[r], must.Sprintf("rank %d", r))
		t.Cleanup(func() { gs[r].Close() })
	}
	return gs
}

// onAll runs f on every rank at once and returns the errors by rank.
func onAll(gs []*Group, f func(r int, g *Group) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() { errs[r] = f(r, g) })
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		must.NoError(t, err, must.Sprintf("rank %d", r))
	}
}

// exactData returns small integers: their sums are exact in any order, so
// the ring must match a naive sum bit for bit.
func exactData(seed uint64, rank, n int) []float64 {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)))
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(rng.IntN(2001) - 1000)
	}
	return x
}

// TestAllReduceInProcess checks many lengths, chunk sizes and gang sizes
// against a naive sum, on the direct and the portable (explicit
// little-endian) paths.
func TestAllReduceInProcess(t *testing.T) {
	cases := []struct {
		portable, inline bool
		chunk            int
		lengths          []int
	}{
		// Tiny chunks: many chunks per segment, the pipeline's windows fill.
		{false, false, 16, []int{0, 1, 7, 13, 101}},
		{true, false, 16, []int{0, 1, 7, 13, 101}},
		{false, false, 4096, []int{0, 1, 7, 5003}},
		// Small collectives on the caller's goroutine.
		{false, true, 16, []int{0, 1, 7, 13, 101}},
		{true, true, 4096, []int{0, 1, 7, 5003}},
	}
	for _, tc := range cases {
		for n := 1; n <= 4; n++ {
			t.Run(fmt.Sprintf("portable=%v/inline=%v/chunk=%d/n=%d", tc.portable, tc.inline, tc.chunk, n), func(t *testing.T) {
				gs := gang(t, n, func(c *Config) { c.ChunkBytes = tc.chunk })
				for _, g := range gs {
					if n > 1 {
						// Ranks of one process share a host: shared memory.
						next, prev := g.transports()
						must.Eq(t, "shm/shm", next+"/"+prev)
					}
					g.portable = tc.portable
					if !tc.inline {
						g.inlineMax = 0
					}
				}
				for _, length := range append(tc.lengths, n-1, n+1) {
					for _, op := range []Op{Sum, Mean} {
						checkAllReduce(t, gs, length, op)
					}
				}
			})
		}
	}
}

func checkAllReduce(t *testing.T, gs []*Group, length int, op Op) {
	t.Helper()
	n := len(gs)
	in64 := make([][]float64, n)
	in32 := make([][]float32, n)
	want64 := make([]float64, length)
	want32 := make([]float32, length)
	for r := range n {
		in64[r] = exactData(uint64(length), r, length)
		in32[r] = make([]float32, length)
		for i, v := range in64[r] {
			in32[r][i] = float32(v)
			want64[i] += v
			want32[i] += float32(v)
		}
	}
	if op == Mean {
		divide(want64, n)
		divide(want32, n)
	}
	noErrors(t, onAll(gs, func(r int, g *Group) error {
		if err := g.AllReduceFloat64(t.Context(), in64[r], op); err != nil {
			return err
		}
		return g.AllReduceFloat32(t.Context(), in32[r], op)
	}))
	for r := range n {
		sameBits(t, want64, in64[r], "float64 rank %d len %d op %d", r, length, op)
		sameBits(t, want32, in32[r], "float32 rank %d len %d op %d", r, length, op)
	}
}

// sameBits fails the test unless want and got hold the same bits.
func sameBits[T float](t *testing.T, want, got []T, format string, args ...any) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf(format+": length %d, want %d", append(args, len(got), len(want))...)
	}
	if bytes.Equal(asBytes(want), asBytes(got)) {
		return
	}
	for i := range want {
		if math.Float64bits(float64(want[i])) != math.Float64bits(float64(got[i])) {
			t.Fatalf(format+": element %d is %v, want %v", append(args, i, got[i], want[i])...)
		}
	}
}

// Non-exact random data: the result differs from a naive sum only by
// rounding, and all ranks agree bit for bit.
func TestAllReduceBitIdentical(t *testing.T) {
	const n, length = 3, 10007
	gs := gang(t, n, func(c *Config) { c.ChunkBytes = 4096 })
	bufs := make([][]float32, n)
	naive := make([]float64, length)
	for r := range n {
		rng := rand.New(rand.NewPCG(1, uint64(r)))
		bufs[r] = make([]float32, length)
		for i := range bufs[r] {
			bufs[r][i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(8)-4)))
			naive[i] += float64(bufs[r][i])
		}
	}
	noErrors(t, onAll(gs, func(r int, g *Group) error { return g.AllReduceFloat32(t.Context(), bufs[r], Sum) }))
	for r := 1; r < n; r++ {
		sameBits(t, bufs[0], bufs[r], "rank %d differs from rank 0", r)
	}
	for i, v := range bufs[0] {
		if math.Abs(float64(v)-naive[i]) > 1e-5*(1+math.Abs(naive[i])) {
			t.Fatalf("element %d: %v, naive sum %v", i, v, naive[i])
		}
	}
}

func TestBroadcastAllGatherBarrierInProcess(t *testing.T) {
	for _, inline := range []bool{false, true} {
		for n := 1; n <= 4; n++ {
			t.Run(fmt.Sprintf("inline=%v/n=%d", inline, n), func(t *testing.T) {
				gs := gang(t, n, func(c *Config) { c.ChunkBytes = 16 })
				for _, g := range gs {
					if !inline {
						g.inlineMax = 0
					}
				}
				checkBroadcastAllGatherBarrier(t, gs)
			})
		}
	}
}

func checkBroadcastAllGatherBarrier(t *testing.T, gs []*Group) {
	t.Helper()
	n := len(gs)
	for root := range n {
		for _, length := range []int{0, 5, 16, 100} {
			bufs := make([][]byte, n)
			for r := range n {
				bufs[r] = bytes.Repeat([]byte{byte(r + 1)}, length)
			}
			noErrors(t, onAll(gs, func(r int, g *Group) error { return g.Broadcast(t.Context(), bufs[r], root) }))
			for r := range n {
				must.Eq(t, bufs[root], bufs[r])
			}
		}
	}
	outs := make([][][]byte, n)
	noErrors(t, onAll(gs, func(r int, g *Group) error {
		var err error
		outs[r], err = g.AllGather(t.Context(), bytes.Repeat([]byte{byte('a' + r)}, r*3))
		return err
	}))
	for r := range n {
		for q := range n {
			must.Eq(t, bytes.Repeat([]byte{byte('a' + q)}, q*3), outs[r][q], must.Sprintf("rank %d block %d", r, q))
		}
	}
	noErrors(t, onAll(gs, func(r int, g *Group) error { return g.Barrier(t.Context()) }))
}

// A rank calling a different collective than its peers is an error on
// every rank, not silent corruption.
func TestDesyncDetected(t *testing.T) {
	gs := gang(t, 3, func(c *Config) { c.Timeout = 3 * time.Second })
	errs := onAll(gs, func(r int, g *Group) error {
		if r == 1 {
			return g.Broadcast(t.Context(), make([]byte, 8), 0)
		}
		return g.AllReduceFloat32(t.Context(), make([]float32, 2), Sum)
	})
	for r, err := range errs {
		must.Error(t, err, must.Sprintf("rank %d", r))
		must.True(t, errors.Is(err, ErrProtocol) || errors.Is(err, ErrPeerLost), must.Sprintf("rank %d: %v", r, err))
	}
}

func TestClosedGroup(t *testing.T) {
	gs := gang(t, 2, nil)
	must.NoError(t, gs[0].Close())
	must.NoError(t, gs[0].Close())
	err := gs[0].Barrier(t.Context())
	must.ErrorIs(t, err, ErrClosed)
	// The peer sees the loss at its next collective.
	err = gs[1].AllReduceFloat64(t.Context(), make([]float64, 1000), Sum)
	must.ErrorIs(t, err, ErrPeerLost)
}

// A collective whose peer never arrives ends at the Timeout with ErrPeerLost.
func TestDeadline(t *testing.T) {
	gs := gang(t, 2, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	start := time.Now()
	err := gs[0].Barrier(t.Context())
	must.ErrorIs(t, err, ErrPeerLost)
	must.Less(t, 3*time.Second, time.Since(start))
}

// Cancelling the context abandons the collective and the group.
func TestContextCancel(t *testing.T) {
	gs := gang(t, 2, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err := gs[0].Barrier(ctx)
	must.ErrorIs(t, err, context.DeadlineExceeded)
	must.ErrorIs(t, gs[0].Barrier(t.Context()), ErrPeerLost)
}

func TestSizeOne(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	g, err := New(t.Context(), Config{Rank: 0, Size: 1, Listener: ln})
	must.NoError(t, err)
	defer g.Close()
	x := []float32{1, 2, 3}
	must.NoError(t, g.AllReduceFloat32(t.Context(), x, Mean))
	must.Eq(t, []float32{1, 2, 3}, x)
	out, err := g.AllGather(t.Context(), []byte("hi"))
	must.NoError(t, err)
	must.Eq(t, [][]byte{[]byte("hi")}, out)
	must.NoError(t, g.Broadcast(t.Context(), []byte("x"), 0))
	must.NoError(t, g.Barrier(t.Context()))
	// The listener was taken over and closed.
	_, err = ln.Accept()
	must.ErrorIs(t, err, net.ErrClosed)
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"zero size", Config{Size: 0}},
		{"rank too big", Config{Rank: 2, Size: 2}},
		{"no listener", Config{Rank: 0, Size: 2, Peers: []string{"a", "b"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(t.Context(), tc.cfg)
			must.Error(t, err)
		})
	}
}

// logBuffer is a goroutine-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Strangers connecting to a rank's listener while the gang forms are
// refused, and the gang forms anyway.
func TestStrangersRefused(t *testing.T) {
	const n = 3
	lns, addrs := listeners(t, n)
	secret := []byte("run-secret")
	var logs logBuffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})

	type stranger struct {
		name string
		talk func(c net.Conn) // what it does after connecting
	}
	// A wrong-generation hello needs the secret: an insider from a stale
	// generation.
	strangers := []stranger{
		{"silent", func(c net.Conn) {}},
		{"junk", func(c net.Conn) { c.Write(bytes.Repeat([]byte{0xff}, 200)) }},
		{"wrong secret", func(c net.Conn) { _ = handshakeAs(c, []byte("guess")) }},
	}
	conns := make([]net.Conn, len(strangers))
	for i, s := range strangers {
		c, err := net.Dial("tcp", addrs[1])
		must.NoError(t, err)
		defer c.Close()
		conns[i] = c
		go s.talk(c)
	}
	gs := make([]*Group, n)
	noErrors(t, onAll(gs, func(r int, _ *Group) error {
		var err error
		gs[r], err = New(t.Context(), Config{
			Rank: r, Size: n, Listener: lns[r], Peers: addrs,
			Timeout: 3 * time.Second, Secret: secret, Logger: logger,
		})
		return err
	}))
	for _, g := range gs {
		defer g.Close()
	}
	noErrors(t, onAll(gs, func(r int, g *Group) error {
		return g.AllReduceFloat32(t.Context(), []float32{float32(r)}, Sum)
	}))
	// Every stranger's connection was closed on it.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := readAll(c)
		must.NoError(t, err, must.Sprintf("stranger %s: connection not closed cleanly", strangers[i].name))
	}
	must.StrContains(t, logs.String(), "refused connection")
}

// readAll reads until EOF (nil) or another error.
func readAll(c net.Conn) ([]byte, error) {
	var out []byte
	buf := make([]byte, 512)
	for {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			var ne net.Error
			if errors.As(err, &ne) && !ne.Timeout() {
				return out, nil // reset: also closed
			}
			return out, err
		}
	}
}

// A peer from another generation, holding the secret, is refused too.
func TestWrongGenerationRefused(t *testing.T) {
	lns, addrs := listeners(t, 2)
	cfg := func(r int, gen uint64) Config {
		return Config{Rank: r, Size: 2, Listener: lns[r], Peers: addrs, Timeout: time.Second, Secret: []byte("s"), Generation: gen}
	}
	errs := onAll(make([]*Group, 2), func(r int, _ *Group) error {
		g, err := New(t.Context(), cfg(r, uint64(r)))
		if err == nil {
			g.Close()
		}
		return err
	})
	for r, err := range errs {
		must.Error(t, err, must.Sprintf("rank %d", r))
	}
	must.True(t, errors.Is(errs[0], ErrRefused) || errors.Is(errs[1], ErrRefused), must.Sprintf("%v", errs))
}

// handshakeAs plays the dialing side of authentication with secret.
func handshakeAs(c net.Conn, secret []byte) error {
	return auth.Handshake(c, secret, auth.Dialer, 2*time.Second)
}
