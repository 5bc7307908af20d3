package collective

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// Benchmarks run a 2-rank gang: this process is rank 0, a re-executed test
// binary is rank 1. References are measured between the same two processes
// in the same run over a plain loopback TCP connection (Go defaults).

// benchPair is rank 0's view of a benchmark gang.
type benchPair struct {
	g   *Group
	c   *child
	raw net.Conn // plain TCP to the child, for the references
}

// newBenchPair starts the child and forms the gang over transport ("shm"
// or "tcp"; "" is the default, which is shm between these two processes).
func newBenchPair(b *testing.B, transport string) *benchPair {
	b.Helper()
	tr, err := ParseTransport(transport)
	must.NoError(b, err)
	c := spawn(b, "bench", 1, 2, "COLLECTIVE_TRANSPORT="+transport)
	hi := c.recv(b, 30*time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(b, err)
	peers := []string{ln.Addr().String(), hi.Addr}
	c.send(b, msg{Peers: peers})
	g, err := New(b.Context(), Config{Rank: 0, Size: 2, Listener: ln, Peers: peers, Timeout: 30 * time.Second, Transport: tr})
	must.NoError(b, err)
	if transport != "" {
		next, prev := g.transports()
		must.Eq(b, transport+"/"+transport, next+"/"+prev)
	}
	b.Cleanup(func() { g.Close() })
	raw, err := net.Dial("tcp", hi.RawAddr)
	must.NoError(b, err)
	b.Cleanup(func() { raw.Close() })
	return &benchPair{g: g, c: c, raw: raw}
}

// do sends a command to the child and, after f ran here, waits for it.
func (p *benchPair) do(b *testing.B, m msg, f func()) {
	b.Helper()
	p.c.send(b, m)
	f()
	must.True(b, p.c.recv(b, 60*time.Second).Done)
}

// tcpThroughput streams n bytes to the child and returns bytes per second,
// counting until the child acknowledges the last byte. Like the
// all-reduce, it reads from and writes to buffers of span bytes (cycled
// through in 1 MiB calls), so both touch the same amount of memory.
func (p *benchPair) tcpThroughput(b *testing.B, n, span int) float64 {
	b.Helper()
	src := make([]byte, max(span, 1<<20))
	for i := range src {
		src[i] = byte(i) // touch every page before timing
	}
	var took time.Duration
	p.do(b, msg{Cmd: "sink", N: n, Iters: len(src)}, func() {
		_, err := io.ReadFull(p.raw, src[:1]) // the child's buffer is ready
		must.NoError(b, err)
		start := time.Now()
		off := 0
		for left := n; left > 0; {
			k := min(left, 1<<20, len(src)-off)
			_, err := p.raw.Write(src[off : off+k])
			must.NoError(b, err)
			left -= k
			off = (off + k) % len(src)
		}
		_, err = io.ReadFull(p.raw, src[:1])
		must.NoError(b, err)
		took = time.Since(start)
	})
	return float64(n) / took.Seconds()
}

// pingPong returns the mean round-trip time of a 1-byte ping-pong.
func (p *benchPair) pingPong(b *testing.B, iters int) time.Duration {
	b.Helper()
	var took time.Duration
	one := make([]byte, 1)
	p.do(b, msg{Cmd: "pong", Iters: iters}, func() {
		start := time.Now()
		for range iters {
			_, err := p.raw.Write(one)
			must.NoError(b, err)
			_, err = io.ReadFull(p.raw, one)
			must.NoError(b, err)
		}
		took = time.Since(start)
	})
	return took / time.Duration(iters)
}

// allReduce runs iters all-reduces of n float32 on both ranks and returns
// the time rank 0 took; the benchmark timer runs only meanwhile. One untimed all-reduce first touches the buffers
// (page faults) and lines the two ranks up.
func (p *benchPair) allReduce(b *testing.B, n, iters int) time.Duration {
	b.Helper()
	buf := make([]float32, n)
	var took time.Duration
	p.do(b, msg{Cmd: "allreduce", N: n, Iters: iters + 1}, func() {
		must.NoError(b, p.g.AllReduceFloat32(b.Context(), buf, Sum))
		b.StartTimer()
		start := time.Now()
		for range iters {
			must.NoError(b, p.g.AllReduceFloat32(b.Context(), buf, Sum))
		}
		took = time.Since(start)
		b.StopTimer()
	})
	return took
}

// B1: all-reduce bus bandwidth over a plain TCP stream's throughput.
// busbw = bytes/time * 2(N-1)/N; with 2 ranks each rank sends its whole
// buffer once and receives it once, so busbw/tcp = 1 means the ring moves
// data as fast as one plain TCP stream does, both directions at once.
// transport=shm is the default between ranks of one host (bulk data in
// shared memory); transport=tcp forces the ring's TCP connections.
func BenchmarkAllReduceBusBW(b *testing.B) {
	const ranks = 2
	for _, transport := range []string{"shm", "tcp"} {
		b.Run("transport="+transport, func(b *testing.B) {
			p := newBenchPair(b, transport)
			for _, size := range []int{4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20} {
				b.Run(sizeName(size), func(b *testing.B) {
					b.StopTimer()
					stream := max(64<<20, 2*size)
					tcp := p.tcpThroughput(b, stream, size)
					took := p.allReduce(b, size/4, b.N)
					tcp = max(tcp, p.tcpThroughput(b, stream, size)) // the better reference: conservative
					busbw := float64(size) * float64(b.N) / took.Seconds() * 2 * (ranks - 1) / ranks
					b.SetBytes(int64(size))
					b.ReportMetric(busbw/tcp, "busbw/tcp")
					b.ReportMetric(busbw/1e6, "busbw-MB/s")
					b.ReportMetric(tcp/1e6, "tcp-MB/s")
				})
			}
		})
	}
}

// B2: 4 KiB all-reduce latency over 2(N-1) TCP round trips.
func BenchmarkAllReduceLatency(b *testing.B) {
	p := newBenchPair(b, "")
	const ranks = 2
	b.StopTimer()
	p.allReduce(b, 1024, 50) // warm up
	rtt := p.pingPong(b, 500)
	took := p.allReduce(b, 1024, b.N)
	rtt = min(rtt, p.pingPong(b, 500)) // best reference: conservative
	per := took / time.Duration(b.N)
	b.ReportMetric(float64(per)/float64(2*(ranks-1)*rtt), "time/2(N-1)rtt")
	b.ReportMetric(float64(rtt.Microseconds()), "rtt-µs")
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// bench is rank 1 of a benchmark: it serves the parent's commands.
func (w *worker) bench(ctx context.Context) error {
	rawLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer rawLn.Close()
	if err := w.join(ctx, msg{RawAddr: rawLn.Addr().String()}); err != nil {
		return err
	}
	defer w.g.Close()
	raw, err := rawLn.Accept()
	if err != nil {
		return err
	}
	defer raw.Close()
	scratch := make([]byte, 1<<20)
	var buf []float32
	for {
		var m msg
		if err := w.in.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		switch m.Cmd {
		case "allreduce":
			if len(buf) != m.N {
				buf = make([]float32, m.N)
			}
			for range m.Iters {
				if err := w.g.AllReduceFloat32(ctx, buf, Sum); err != nil {
					return err
				}
			}
		case "sink": // m.N bytes into a buffer of m.Iters bytes, cycled through
			dst := make([]byte, m.Iters)
			for i := range dst {
				dst[i] = 1
			}
			if _, err := raw.Write(dst[:1]); err != nil {
				return err
			}
			off := 0
			for left := m.N; left > 0; {
				n, err := raw.Read(dst[off : off+min(left, 1<<20, len(dst)-off)])
				if err != nil {
					return err
				}
				left -= n
				off = (off + n) % len(dst)
			}
			if _, err := raw.Write(dst[:1]); err != nil {
				return err
			}
		case "pong":
			for range m.Iters {
				if _, err := io.ReadFull(raw, scratch[:1]); err != nil {
					return err
				}
				if _, err := raw.Write(scratch[:1]); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("unknown command %q", m.Cmd)
		}
		w.say(msg{Done: true})
	}
}

// gloo runs testdata/gloo_bench.py (torch.distributed with Gloo, 2 ranks)
// and returns its seconds per all-reduce by size in bytes. It skips the
// benchmark when Debian's python3-torch is not installed.
func gloo(b *testing.B, sizes []int) map[int]float64 {
	b.Helper()
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import torch.distributed").Run(); err != nil {
		b.Skipf("torch.distributed not available (apt-get install python3-torch): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(b, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := []string{filepath.Join("testdata", "gloo_bench.py"), strconv.Itoa(port)}
	for _, s := range sizes {
		args = append(args, strconv.Itoa(s))
	}
	cmd := exec.Command(python, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	must.NoError(b, err, must.Sprintf("gloo_bench.py: %s", stderr.String()))
	per := map[int]float64{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Bytes, Iters int
			Seconds      float64
		}
		must.NoError(b, json.Unmarshal([]byte(line), &r), must.Sprintf("line %q", line))
		per[r.Bytes] = r.Seconds / float64(r.Iters)
	}
	return per
}

// Optional: the B1 sizes against torch.distributed with Gloo between two
// processes on the same machine, measured in the same run (Gloo first, then
// ours). ours/gloo is Gloo's time per all-reduce over ours: above 1 we are
// faster.
func BenchmarkVersusGloo(b *testing.B) {
	sizes := []int{4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}
	ref := gloo(b, sizes)
	p := newBenchPair(b, "")
	for _, size := range sizes {
		b.Run(sizeName(size), func(b *testing.B) {
			b.StopTimer()
			took := p.allReduce(b, size/4, b.N)
			ours := took.Seconds() / float64(b.N)
			b.SetBytes(int64(size))
			b.ReportMetric(ref[size]/ours, "ours/gloo")
			b.ReportMetric(float64(size)/ref[size]/1e6, "gloo-MB/s")
		})
	}
}
