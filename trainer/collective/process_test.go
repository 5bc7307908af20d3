package collective

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// Multi-process tests re-execute the test binary as worker processes
// (TestHelperProcess with helperEnv set). Parent and child talk in JSON
// lines: the child's stdout lines that start with linePrefix, and its stdin.

const (
	helperEnv  = "GO_WANT_COLLECTIVE_HELPER"
	linePrefix = "@@collective "
)

// msg is every line parent and child exchange; each uses a few fields.
type msg struct {
	Addr     string   `json:",omitempty"` // child: its ring listener
	RawAddr  string   `json:",omitempty"` // child: its plain TCP listener (benchmarks)
	Peers    []string `json:",omitempty"` // parent: every rank's ring listener
	Case     int      `json:",omitempty"`
	Hash     string   `json:",omitempty"`
	Err      string   `json:",omitempty"`
	PeerLost bool     `json:",omitempty"`
	Ready    bool     `json:",omitempty"`
	Done     bool     `json:",omitempty"`
	// Transports is what carries bulk data to next and from prev, e.g.
	// "shm/tcp" (Group.transports).
	Transports string `json:",omitempty"`
	// Benchmark commands from the parent.
	Cmd   string `json:",omitempty"`
	N     int    `json:",omitempty"`
	Iters int    `json:",omitempty"`
}

// child is a worker process seen from the parent.
type child struct {
	rank  int
	cmd   *exec.Cmd
	enc   *json.Encoder
	lines chan msg
	log   *logBuffer
}

// spawn starts the test binary as rank of size running script.
func spawn(t testing.TB, script string, rank, size int, extraEnv ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+script,
		"COLLECTIVE_RANK="+strconv.Itoa(rank), "COLLECTIVE_SIZE="+strconv.Itoa(size))
	cmd.Env = append(cmd.Env, extraEnv...)
	c := &child{rank: rank, cmd: cmd, lines: make(chan msg, 64), log: &logBuffer{}}
	cmd.Stderr = c.log
	stdin, err := cmd.StdinPipe()
	must.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	must.NoError(t, err)
	must.NoError(t, cmd.Start())
	c.enc = json.NewEncoder(stdin)
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), linePrefix)
			if !ok {
				continue
			}
			var m msg
			if json.Unmarshal([]byte(line), &m) == nil {
				c.lines <- m
			}
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			c.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("rank %d stderr:\n%s", rank, c.log.String())
		}
	})
	return c
}

func (c *child) send(t testing.TB, m msg) {
	t.Helper()
	must.NoError(t, c.enc.Encode(m))
}

// recv returns the child's next line, failing the test after timeout.
func (c *child) recv(t testing.TB, timeout time.Duration) msg {
	t.Helper()
	select {
	case m, ok := <-c.lines:
		if !ok {
			t.Fatalf("rank %d exited early; stderr:\n%s", c.rank, c.log.String())
		}
		if m.Err != "" && !m.PeerLost {
			t.Fatalf("rank %d failed: %s", c.rank, m.Err)
		}
		return m
	case <-time.After(timeout):
		t.Fatalf("rank %d said nothing for %v; stderr:\n%s", c.rank, timeout, c.log.String())
		return msg{}
	}
}

// launch starts size worker processes running script, waits for their
// listeners and tells each the peers' addresses.
func launch(t testing.TB, script string, size int, extraEnv ...string) []*child {
	t.Helper()
	cs := make([]*child, size)
	peers := make([]string, size)
	for r := range size {
		cs[r] = spawn(t, script, r, size, extraEnv...)
	}
	for r, c := range cs {
		peers[r] = c.recv(t, 30*time.Second).Addr
	}
	for _, c := range cs {
		c.send(t, msg{Peers: peers})
	}
	return cs
}

// TestHelperProcess is the worker process body; it does nothing in a
// normal test run.
func TestHelperProcess(t *testing.T) {
	script := os.Getenv(helperEnv)
	if script == "" {
		t.Skip("helper process for the multi-process tests")
	}
	rank, _ := strconv.Atoi(os.Getenv("COLLECTIVE_RANK"))
	size, _ := strconv.Atoi(os.Getenv("COLLECTIVE_SIZE"))
	w := &worker{rank: rank, size: size, in: json.NewDecoder(os.Stdin)}
	if err := w.run(script); err != nil {
		w.say(msg{Err: err.Error(), PeerLost: errors.Is(err, ErrPeerLost)})
	}
	os.Exit(0)
}

// worker is the child side.
type worker struct {
	rank, size int
	in         *json.Decoder
	mu         sync.Mutex
	g          *Group
}

func (w *worker) say(m msg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, _ := json.Marshal(m)
	fmt.Printf("%s%s\n", linePrefix, b)
}

// join listens, reports the address, learns the peers and forms the group.
func (w *worker) join(ctx context.Context, extra msg) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	extra.Addr = ln.Addr().String()
	w.say(extra)
	var m msg
	if err := w.in.Decode(&m); err != nil {
		return fmt.Errorf("read peers: %w", err)
	}
	transport, err := ParseTransport(os.Getenv("COLLECTIVE_TRANSPORT"))
	if err != nil {
		return err
	}
	w.g, err = New(ctx, Config{
		Rank: w.rank, Size: w.size, Listener: ln, Peers: m.Peers,
		Timeout: 20 * time.Second, Secret: []byte(os.Getenv("COLLECTIVE_SECRET")),
		Transport: transport, shmDir: os.Getenv("COLLECTIVE_SHM_DIR"),
	})
	return err
}

// transports names what carries this worker's bulk data, for msg.Transports.
func (w *worker) transports() string {
	next, prev := w.g.transports()
	return next + "/" + prev
}

func (w *worker) run(script string) error {
	ctx := context.Background()
	switch script {
	case "property":
		if err := w.join(ctx, msg{}); err != nil {
			return err
		}
		defer w.g.Close()
		return w.property(ctx)
	case "kill":
		if err := w.join(ctx, msg{}); err != nil {
			return err
		}
		defer w.g.Close()
		return w.untilLost(ctx)
	case "bench":
		return w.bench(ctx)
	}
	return fmt.Errorf("unknown script %q", script)
}

// propCase is one all-reduce of the property test.
type propCase struct {
	f64   bool
	op    Op
	n     int
	exact bool // small integers: the naive sum is exact, compare bits
}

func (c propCase) String() string {
	return fmt.Sprintf("f64=%v op=%d n=%d exact=%v", c.f64, c.op, c.n, c.exact)
}

const (
	largeF32 = 3<<18 + 7 // a little over 3 MiB
	largeF64 = 3<<17 + 7
)

func propCases(size int) []propCase {
	var cs []propCase
	for _, f64 := range []bool{false, true} {
		lengths := []int{0, 1, 17, 1009} // empty, odd, prime
		if size > 2 {
			lengths = append(lengths, size-1) // fewer elements than ranks
		}
		for _, op := range []Op{Sum, Mean} {
			for _, n := range lengths {
				cs = append(cs, propCase{f64: f64, op: op, n: n, exact: true})
			}
		}
	}
	// Two large buffers per gang size, one with exact data (bitwise against
	// the naive sum), one with floats of mixed magnitude (within rounding of
	// it, bitwise the same on every rank); alternate gang sizes cover each
	// type and op. (Four per size would double the test's run time.)
	large := []propCase{
		{f64: false, op: Sum, exact: true}, {f64: true, op: Mean},
		{f64: true, op: Mean, exact: true}, {f64: false, op: Sum},
		{f64: false, op: Mean, exact: true}, {f64: true, op: Sum},
		{f64: true, op: Sum, exact: true}, {f64: false, op: Mean},
	}
	for _, c := range large[(2*size)%8 : (2*size)%8+2] {
		c.n = largeF32
		if c.f64 {
			c.n = largeF64
		}
		cs = append(cs, c)
	}
	return cs
}

// caseData is rank's input for case i: small integers, or normal-ish
// floats of mixed magnitude. A splitmix64 stream keeps generation cheap
// under the race detector (the parent regenerates every rank's input).
func caseData(c propCase, i, rank int) []float64 {
	rng := splitmix(uint64(i)<<32 ^ uint64(rank))
	x := make([]float64, c.n)
	for j := range x {
		z := rng.next()
		if c.exact {
			x[j] = float64(int64(z>>48) - 1<<15) // in [-32768, 32768)
		} else {
			// A uniform mantissa in [-1, 1) scaled by 2^(0..15).
			x[j] = (float64(z>>11)/(1<<53)*2 - 1) * float64(uint64(1)<<(z&15))
		}
	}
	return x
}

// splitmix is the SplitMix64 generator: cheap, and deterministic across
// processes.
type splitmix uint64

func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:16])
}

// encode returns the little-endian bytes of x as float32 or float64.
func encodeCase(x []float64, f64 bool) []byte {
	if f64 {
		return bytes.Clone(asBytes(x))
	}
	return bytes.Clone(asBytes(toF32(x)))
}

func toF32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

func bcastData(root, n int) []byte {
	rng := splitmix(99<<32 ^ uint64(root))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.next())
	}
	return b
}

func gatherLen(rank int) int { return []int{0, 5, 70001, 1, 333, 4096}[rank%6] }

const bcastLen = 1<<20 + 3

// property runs every case and reports a digest of each result; rank 0
// also writes inexact results to files for the parent's tolerance check.
func (w *worker) property(ctx context.Context) error {
	dir := os.Getenv("COLLECTIVE_OUT")
	for i, c := range propCases(w.size) {
		x := caseData(c, i, w.rank)
		var out []byte
		if c.f64 {
			if err := w.g.AllReduceFloat64(ctx, x, c.op); err != nil {
				return err
			}
			out = asBytes(x)
		} else {
			y := toF32(x)
			if err := w.g.AllReduceFloat32(ctx, y, c.op); err != nil {
				return err
			}
			out = asBytes(y)
		}
		if !c.exact && w.rank == 0 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("case%d", i)), out, 0o644); err != nil {
				return err
			}
		}
		w.say(msg{Case: i, Hash: digest(out)})
	}
	for root := range w.size {
		b := make([]byte, bcastLen)
		if w.rank == root {
			b = bcastData(root, bcastLen)
		}
		if err := w.g.Broadcast(ctx, b, root); err != nil {
			return err
		}
		w.say(msg{Case: 1000 + root, Hash: digest(b)})
	}
	out, err := w.g.AllGather(ctx, bcastData(w.rank, gatherLen(w.rank)))
	if err != nil {
		return err
	}
	w.say(msg{Case: 2000, Hash: digest(bytes.Join(out, []byte("|")))})
	for range 3 {
		if err := w.g.Barrier(ctx); err != nil {
			return err
		}
	}
	w.say(msg{Done: true, Transports: w.transports()})
	return nil
}

// TestMultiProcess runs the gang as separate processes over real TCP for
// 1..6 ranks. All-reduce results must equal a naive sum (bit for bit for
// exact data, within rounding otherwise) and be bit-identical on every rank;
// broadcast, all-gather with differing lengths and barrier are checked too.
//
// Gangs run over shared memory (all ranks share this host), and one over
// TCP forced by the setting; each checks which transport it got.
func TestMultiProcess(t *testing.T) {
	type gangCase struct {
		size      int
		transport string
	}
	var gangs []gangCase
	for size := 1; size <= 6; size++ {
		gangs = append(gangs, gangCase{size, "shm"})
	}
	gangs = append(gangs, gangCase{3, "tcp"})
	for _, gc := range gangs {
		size := gc.size
		t.Run(fmt.Sprintf("ranks=%d/transport=%s", size, gc.transport), func(t *testing.T) {
			t.Parallel()
			dir, shmDir := t.TempDir(), t.TempDir()
			wantTransports := gc.transport + "/" + gc.transport
			if size == 1 {
				wantTransports = "/"
			}
			cs := launch(t, "property", size, "COLLECTIVE_OUT="+dir, "COLLECTIVE_SECRET=s3cret-"+strconv.Itoa(size),
				"COLLECTIVE_TRANSPORT="+gc.transport, "COLLECTIVE_SHM_DIR="+shmDir)
			cases := propCases(size)
			for i, c := range cases {
				hashes := make([]string, size)
				for r, ch := range cs {
					m := ch.recv(t, 60*time.Second)
					must.Eq(t, i, m.Case)
					hashes[r] = m.Hash
				}
				for r := 1; r < size; r++ {
					must.Eq(t, hashes[0], hashes[r], must.Sprintf("case %d %v: rank %d differs from rank 0", i, c, r))
				}
				checkAgainstNaive(t, dir, i, c, size, hashes[0])
			}
			for root := range size {
				want := digest(bcastData(root, bcastLen))
				for r, ch := range cs {
					m := ch.recv(t, 60*time.Second)
					must.Eq(t, 1000+root, m.Case)
					must.Eq(t, want, m.Hash, must.Sprintf("broadcast from %d, rank %d", root, r))
				}
			}
			blocks := make([][]byte, size)
			for r := range size {
				blocks[r] = bcastData(r, gatherLen(r))
			}
			want := digest(bytes.Join(blocks, []byte("|")))
			for r, ch := range cs {
				m := ch.recv(t, 60*time.Second)
				must.Eq(t, want, m.Hash, must.Sprintf("all-gather on rank %d", r))
			}
			for r, ch := range cs {
				m := ch.recv(t, 60*time.Second)
				must.True(t, m.Done)
				must.Eq(t, wantTransports, m.Transports, must.Sprintf("rank %d transports", r))
			}
			mustBeEmpty(t, shmDir)
		})
	}
}

// checkAgainstNaive compares the ranks' result for case i with a plain
// sum of the inputs.
func checkAgainstNaive(t *testing.T, dir string, i int, c propCase, size int, got string) {
	t.Helper()
	sum := make([]float64, c.n)
	sum32 := make([]float32, c.n)
	mag := make([]float64, c.n) // sum of magnitudes: the rounding scale
	for r := range size {
		for j, v := range caseData(c, i, r) {
			sum[j] += v
			sum32[j] += float32(v)
			mag[j] += math.Abs(v)
		}
	}
	if c.op == Mean {
		divide(sum, size)
		divide(sum32, size)
		divide(mag, size)
	}
	if c.exact {
		want := encodeCase(sum, true)
		if !c.f64 {
			want = bytes.Clone(asBytes(sum32))
		}
		must.Eq(t, digest(want), got, must.Sprintf("case %d %v: result is not the naive sum", i, c))
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("case%d", i)))
	must.NoError(t, err)
	must.Eq(t, got, digest(b))
	var res []float64
	if c.f64 {
		res = append(res, asElems[float64](alignedCopy(b))...)
	} else {
		for _, v := range asElems[float32](alignedCopy(b)) {
			res = append(res, float64(v))
		}
	}
	must.Eq(t, c.n, len(res))
	tol := 1e-12
	if !c.f64 {
		tol = 1e-5
	}
	for j := range res {
		if d := math.Abs(res[j] - sum[j]); d > tol*mag[j] {
			t.Fatalf("case %d %v: element %d is %v, naive sum %v", i, c, j, res[j], sum[j])
		}
	}
}

func alignedCopy(b []byte) []byte {
	u := make([]float64, (len(b)+7)/8)
	out := asBytes(u)[:len(b)]
	copy(out, b)
	return out
}

// untilLost all-reduces 8 MiB over and over, says "ready" after the first
// one, and reports the error that ends the loop.
func (w *worker) untilLost(ctx context.Context) error {
	buf := make([]float32, 2<<20)
	for i := 0; ; i++ {
		if err := w.g.AllReduceFloat32(ctx, buf, Sum); err != nil {
			return err
		}
		if i == 0 {
			w.say(msg{Ready: true, Transports: w.transports()})
		}
	}
}

// SIGKILL of one worker during large all-reduces: every other rank returns
// ErrPeerLost within 10 s (by cascade: the 20 s network deadline is not what
// ends them).
func TestKillOneWorker(t *testing.T) {
	const size, victim = 4, 2
	shmDir := t.TempDir()
	cs := launch(t, "kill", size, "COLLECTIVE_SHM_DIR="+shmDir)
	for r, c := range cs {
		m := c.recv(t, 60*time.Second)
		must.True(t, m.Ready)
		must.Eq(t, "shm/shm", m.Transports, must.Sprintf("rank %d transports", r))
	}
	// The shared files went as soon as both ends had them mapped.
	mustBeEmpty(t, shmDir)
	time.Sleep(50 * time.Millisecond)
	killed := time.Now()
	must.NoError(t, cs[victim].cmd.Process.Signal(syscall.SIGKILL))
	for r, c := range cs {
		if r == victim {
			continue
		}
		m := c.recv(t, 15*time.Second)
		took := time.Since(killed)
		t.Logf("rank %d: %s after %v", r, m.Err, took)
		must.True(t, m.PeerLost, must.Sprintf("rank %d error %q is not ErrPeerLost", r, m.Err))
		must.Less(t, 10*time.Second, took, must.Sprintf("rank %d took %v", r, took))
	}
	mustBeEmpty(t, shmDir)
}

// mustBeEmpty fails the test if dir holds anything.
func mustBeEmpty(t *testing.T, dir string) {
	t.Helper()
	left, err := os.ReadDir(dir)
	must.NoError(t, err)
	must.SliceEmpty(t, left, must.Sprintf("left in %s", dir))
}
