package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Options describe one local run.
type Options struct {
	// Run is the run, as train.hcl or trainer.Run describe it. Its
	// RendezvousTimeout defaults to 1m here, its CollectiveTimeout to 30s.
	workerenv.Run
	// Dir, when set, is the workers' working directory: a relative command
	// or script path (python3 train.py) names a file there, as a Nomad
	// task's do in its task directory. The run's relative local storage
	// path, and checkpoint to start from, still mean the launcher's
	// working directory.
	Dir string
	// Command and Args start a worker. When Command is empty, the run's
	// Entrypoint decides (workerenv.StartFor, with this program as the
	// binary that carries the builtins and the external wrapper).
	Command string
	Args    []string

	// StopGrace is how long a stopped worker gets between SIGTERM and
	// SIGKILL (default 10s).
	StopGrace time.Duration
	// RejoinTimeout is how long a running worker may stay out of a gang
	// that is re-forming before it is presumed hung (frozen, or stuck in
	// its own code) and killed, so that a replacement can join (default
	// workerenv.DefaultRejoinTimeout).
	RejoinTimeout time.Duration
	// StallFloor and StallFactor set the workers' progress watchdog (see
	// workerenv.StallFloor); zero keeps the workers' defaults.
	StallFloor  time.Duration
	StallFactor float64
	// NoMetrics serves no Prometheus metrics. By default each rank serves
	// them on a loopback port of its own (workerenv.MetricsAddr), the same
	// for every process of the rank, unless Env sets MetricsAddr itself.
	NoMetrics bool
	// OnMetrics, when set, is called once before the workers start with
	// the URL each rank serves its metrics at ("" for none), by rank.
	OnMetrics func(urls []string)

	Stdout, Stderr io.Writer // prefixed worker output (default: discarded)
	// afterStart, when set (by tests), is called after each first start
	// of a rank's process during start-up.
	afterStart func(rank int)

	// Logger receives the launcher's own log lines, the rendezvous
	// server's included (refused strangers, failed accepts). Default:
	// warnings and errors to Stderr, between whole lines of the workers'.
	Logger hclog.Logger
}

// Launch runs the workers and waits until every one of them has exited. It
// returns an error only when the run could not be started; how the workers
// ended is in the Outcome. Cancelling ctx stops every worker (SIGTERM, then
// SIGKILL after StopGrace) and still waits for them.
func Launch(ctx context.Context, o Options) (*Outcome, error) {
	o.defaults()
	if o.NumWorkers < 1 {
		return nil, fmt.Errorf("launch: need at least one worker, got %d", o.NumWorkers)
	}
	if o.Dir != "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("launch: find working directory: %w", err)
		}
		// Workers start in Dir; the run's paths are the caller's.
		o.StoragePath = storage.Rebase(o.StoragePath, wd)
		o.Checkpoint.ResumeFrom = storage.Rebase(o.Checkpoint.ResumeFrom, wd)
	}
	var procEnv []string // what the way of starting needs (the builtin's name, say)
	if o.Command == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("launch: find own executable: %w", err)
		}
		proc, err := workerenv.StartFor(o.Entrypoint, self, workerenv.SpeaksContract)
		if err != nil {
			return nil, fmt.Errorf("launch: %w", err)
		}
		o.Command, o.Args, procEnv = proc.Path, proc.Args, proc.Env
	}
	stdout := &syncWriter{w: o.Stdout}
	stderr := stdout
	if o.Stderr != o.Stdout {
		stderr = &syncWriter{w: o.Stderr}
	}
	if o.Logger == nil {
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: "nomad-train", Output: stderr, Level: hclog.Warn})
	}
	// The run's storage must be writable and not in use by another run of
	// the same name. Found here, that is one clear error; found by the
	// workers, each would fail on it and be replaced until the failure
	// budget ran out.
	st, err := storage.OpenStore(ctx, o.StoragePath, o.Name, storage.Policy{}, storage.WithLogger(o.Logger),
		storage.WithStorageOptions(o.Storage))
	if errors.Is(err, storage.ErrLocked) {
		return nil, fmt.Errorf("launch: %w (is another run of %s still going?)", err, o.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	if err := st.Close(); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	// Launching is a deliberate new attempt: a run that failed for good
	// before may try again (from its latest checkpoint).
	if err := storage.ClearFailed(o.StoragePath, o.Name, storage.WithStorageOptions(o.Storage)); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	sweepStale(o.Logger)
	tmp, lock, err := makeScratch(o.Name)
	if err != nil {
		return nil, err
	}
	defer func() {
		os.RemoveAll(tmp)
		lock.Close()
	}()
	secret, err := newSecret()
	if err != nil {
		return nil, err
	}
	secretFile, err := secretMemfd(secret)
	if err != nil {
		return nil, err
	}
	defer secretFile.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("launch: listen for rendezvous: %w", err)
	}
	mem := rendezvous.NewMemStore(nil)
	srv, err := rendezvous.NewServer(mem, rendezvous.ServerConfig{
		Listener: ln, Secret: []byte(secret), Logger: o.Logger.Named("rendezvous"),
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("launch: rendezvous server: %w", err)
	}
	srvCtx, stopSrv := context.WithCancel(context.Background())
	srvDone := make(chan struct{})
	go func() { defer close(srvDone); srv.Serve(srvCtx) }()
	defer func() { stopSrv(); <-srvDone }()

	// Every worker's contract variables come from the run description,
	// through workerenv, as the driver's do on Nomad; what is this
	// machine's is the place, the secret's descriptor and each rank's
	// hint, member ID and events file.
	base := append(os.Environ(), o.Env...)
	base = append(base, procEnv...)
	we := o.LocalEnv()
	we.Rendezvous = "embedded://" + ln.Addr().String()
	we.SecretFile = secretFD

	g := &gang{opts: o, done: make(chan int, o.NumWorkers), stdout: stdout, stderr: stderr,
		envs: make([][]string, o.NumWorkers), tmp: tmp, store: mem, secret: secretFile, attempt: storage.AttemptID([]byte(secret))}
	g.files = openRunFiles(o, o.Logger.Warn)
	if o.OnMetrics != nil {
		o.OnMetrics(g.files.metricsURLs())
	}
	for i := 0; i < o.NumWorkers; i++ {
		if ctx.Err() != nil {
			// Stopped (Ctrl-C) while starting: start no more; supervise
			// stops those already started and waits for them.
			break
		}
		e := we
		e.RankHint, e.MemberID, e.Events = i, memberID(i), eventsPath(tmp, i)
		g.envs[i] = append(append(base[:len(base):len(base)], e.Environ()...), g.files.env(i)...)
		if err := g.start(i); err != nil {
			g.stopAll(syscall.SIGKILL)
			g.waitAll()
			return nil, err
		}
		if o.afterStart != nil {
			o.afterStart(i)
		}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); g.watchRejoin(wctx) }()
	g.supervise(ctx, tmp)
	stopWatch()
	<-watched
	out := g.outcome(tmp)
	g.mu.Lock()
	g.files.finish(out, ctx.Err() != nil)
	g.mu.Unlock()
	return out, nil
}

// LocalEnv is the contract environment every local worker of o shares:
// the run's (workerenv.Run.WorkerEnv) and this machine's. Launch adds the
// rendezvous endpoint, the secret's descriptor and each rank's hint,
// member ID and events file.
func (o Options) LocalEnv() workerenv.Env {
	o.defaults()
	e := o.WorkerEnv()
	e.Node, _ = os.Hostname()
	e.Addr = "127.0.0.1:0"
	e.StopGrace = o.StopGrace * 3 / 4
	return e
}

func (o *Options) defaults() {
	if o.RendezvousTimeout <= 0 {
		o.RendezvousTimeout = time.Minute
	}
	if o.CollectiveTimeout <= 0 {
		o.CollectiveTimeout = 30 * time.Second
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 10 * time.Second
	}
	if o.RejoinTimeout <= 0 {
		o.RejoinTimeout = workerenv.DefaultRejoinTimeout
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if len(o.Config) == 0 {
		o.Config = []byte("null")
	}
}

// gang is the set of running worker processes of one Launch.
type gang struct {
	opts           Options
	stdout, stderr *syncWriter
	envs           [][]string // each rank's environment
	tmp            string     // the run's scratch directory
	done           chan int   // rank of each worker process as it is reaped

	files   *runFiles // logs and launcher state in the run directory
	store   *rendezvous.MemStore
	secret  *os.File // handed to each worker as its descriptor 3 (secretFD)
	attempt string   // storage.AttemptID of the run's secret

	// Owned by Launch's goroutine.
	restarts          []RankOutcome
	lostBeforeJoining int    // worker processes that failed before joining a generation
	quickFailures     []int  // by rank: failures in a row of processes that did not run long
	exhausted         string // why the failure budget is spent, if it is

	stopped []RankOutcome // workers stopped on their own and replaced (Launch's goroutine)

	mu       sync.Mutex  // guards below
	procs    []*exec.Cmd // index = rank: the rank's current process
	started  []time.Time // when each rank's current process started
	evOffset []int64     // where each rank's current process began in its events file
	ended    []RankOutcome
	order    int
}

// secretFD is where a worker reads the run secret: the launcher's memfd,
// inherited as descriptor 3 (the first of exec.Cmd.ExtraFiles).
const secretFD = "/proc/self/fd/3"

// secretMemfd returns a sealed in-memory file holding secret. The secret
// so never touches a disk: no file of it outlives the launcher, even one
// killed with SIGKILL, whose workers die with it (Pdeathsig) and with them
// the last descriptors of the file. Sealed, no worker can change it for
// the others.
func secretMemfd(secret string) (*os.File, error) {
	fd, err := unix.MemfdCreate("nomad-train-secret", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("launch: make run secret file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "nomad-train-secret")
	if _, err := f.WriteString(secret); err != nil {
		f.Close()
		return nil, fmt.Errorf("launch: write run secret: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("launch: seal run secret: %w", err)
	}
	return f, nil
}

// start starts rank's process, the first time or as a replacement.
func (g *gang) start(rank int) error {
	cmd := exec.Command(g.opts.Command, g.opts.Args...)
	cmd.Env = g.envs[rank]
	cmd.Dir = g.opts.Dir
	prefix := fmt.Sprintf("[rank %d] ", rank)
	stdout := &prefixWriter{dst: g.stdout, prefix: []byte(prefix)}
	stderr := &prefixWriter{dst: g.stderr, prefix: []byte(prefix)}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if l := g.files.logs[rank]; l != nil {
		cmd.Stdout, cmd.Stderr = io.MultiWriter(stdout, l), io.MultiWriter(stderr, l)
	}
	// Each worker leads its own process group, so a terminal's Ctrl-C
	// reaches only the launcher, which stops the workers in order; and
	// each dies with the launcher if the launcher is killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.ExtraFiles = []*os.File{g.secret}
	cmd.WaitDelay = 2 * time.Second
	offset := eventsSize(eventsPath(g.tmp, rank))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("launch: start worker %d: %w", rank, err)
	}
	g.mu.Lock()
	if rank == len(g.procs) {
		g.procs = append(g.procs, cmd)
		g.started = append(g.started, time.Now())
		g.evOffset = append(g.evOffset, offset)
		g.ended = append(g.ended, RankOutcome{Rank: rank, Order: -1})
		g.quickFailures = append(g.quickFailures, 0)
	} else {
		g.procs[rank] = cmd
		g.started[rank] = time.Now()
		g.evOffset[rank] = offset
		g.ended[rank] = RankOutcome{Rank: rank, Order: -1, Restarts: g.ended[rank].Restarts + 1}
	}
	g.files.started(rank, cmd.Process.Pid, g.ended[rank].Restarts)
	g.mu.Unlock()
	go func() {
		err := cmd.Wait()
		stdout.flush()
		stderr.flush()
		g.reaped(rank, err)
		g.done <- rank
	}()
	return nil
}

func (g *gang) reaped(rank int, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := &g.ended[rank]
	r.Order = g.order
	g.order++
	defer func() {
		restarts := 0
		for _, e := range g.ended {
			restarts += e.Restarts
		}
		g.files.ended(*r, restarts)
	}()
	if err == nil {
		return
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Signal = signalName(ws.Signal())
			r.ExitCode = 128 + int(ws.Signal())
			return
		}
		r.ExitCode = ee.ExitCode()
		return
	}
	r.ExitCode = -1
	r.Err = err.Error()
}

// supervise waits for the workers. A worker that fails with an
// infrastructure failure (killed, lost, its gang broken) is replaced by a
// new process, which joins the survivors in the next rendezvous generation;
// the workers themselves enforce the failure budget and exit for good when
// it is spent. A user error, a bad environment or a spent budget stops
// every worker, and so does ctx ending.
func (g *gang) supervise(ctx context.Context, tmp string) {
	g.mu.Lock()
	live := len(g.procs) // processes running or waiting to start
	g.mu.Unlock()
	pending := map[int]*time.Timer{}
	due := make(chan int, g.opts.NumWorkers)
	stopping := false
	stopAll := func(why string) {
		if !stopping {
			stopping = true
			for rank, t := range pending {
				if t.Stop() { // else it is in due already
					delete(pending, rank)
					live--
				}
			}
			g.opts.Logger.Info("stopping workers", "reason", why)
			go g.stop()
		}
	}
	for live > 0 {
		select {
		case rank := <-g.done:
			g.mu.Lock()
			r := g.ended[rank]
			ran := time.Since(g.started[rank])
			offset := g.evOffset[rank]
			g.mu.Unlock()
			if r.ExitCode == 0 || stopping {
				live--
				continue
			}
			if r.Err == "" {
				r.Err = lastFailure(eventsPath(tmp, rank))
			}
			joined := joinedSince(eventsPath(tmp, rank), offset)
			// A run its workers marked failed for good gets no replacement.
			_, failed, _ := storage.FailedForGood(g.opts.StoragePath, g.opts.Name, g.attempt, storage.WithStorageOptions(g.opts.Storage))
			if !failed && r.ExitCode == workerenv.ExitStopped {
				live--
				g.replaceStopped(r, &live, stopAll)
				continue
			}
			if failed || !restartable(r) || !g.withinBudget(joined, rank) {
				live--
				g.stderr.printf("==> rank %d failed: %s\n", rank, r.Message())
				if g.exhausted != "" {
					g.stderr.printf("==> %s\n", g.exhausted)
					f := storage.Failure{Reason: g.exhausted, ExitCode: workerenv.ExitBudgetExhausted, Time: time.Now().UTC(), Attempt: g.attempt}
					if err := storage.MarkFailed(g.opts.StoragePath, g.opts.Name, f, storage.WithStorageOptions(g.opts.Storage)); err != nil {
						g.opts.Logger.Warn("cannot mark the run failed", "error", err)
					}
				}
				stopAll(fmt.Sprintf("rank %d failed", rank))
				continue
			}
			delay := g.replacementDelay(rank, ran)
			g.stderr.printf("==> rank %d failed: %s; starting a replacement in %v\n", rank, r.Message(), delay)
			g.restarts = append(g.restarts, r)
			pending[rank] = time.AfterFunc(delay, func() { due <- rank })
		case rank := <-due:
			delete(pending, rank)
			if stopping {
				live--
				continue
			}
			if err := g.start(rank); err != nil {
				live--
				stopAll(err.Error())
			}
		case <-ctx.Done():
			stopAll("stopped")
			ctx = context.Background() // fire once
		}
	}
}

func memberID(rank int) string { return "local-" + strconv.Itoa(rank) }

// replaceStopped starts a replacement for a worker that exited as stopped
// while the launcher is not stopping the run: the worker alone was asked to
// stop (as by Nomad's alloc stop or a drain), and its gang, which agreed on a
// checkpoint with it, waits in rendezvous for its replacement. A stop of the
// whole run comes through ctx (Ctrl-C), which stops the launcher first.
func (g *gang) replaceStopped(r RankOutcome, live *int, stopAll func(string)) {
	g.stderr.printf("==> rank %d stopped on its own; starting a replacement\n", r.Rank)
	if err := g.start(r.Rank); err != nil {
		stopAll(err.Error())
		return
	}
	g.stopped = append(g.stopped, r)
	*live++
}

// restartable tells infrastructure failures, which a new process may get
// past, from the user's errors and a spent failure budget, which it would
// only repeat.
func restartable(r RankOutcome) bool {
	switch r.ExitCode {
	case workerenv.ExitUserError, workerenv.ExitBadEnv, workerenv.ExitBudgetExhausted, workerenv.ExitStopped:
		return false
	}
	return true
}

func eventsPath(tmp string, rank int) string {
	return filepath.Join(tmp, fmt.Sprintf("events-%d.jsonl", rank))
}

// stop sends SIGTERM to every live worker's group, then SIGKILL after StopGrace.
func (g *gang) stop() {
	g.stopAll(syscall.SIGTERM)
	t := time.NewTimer(g.opts.StopGrace)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.C:
			g.stopAll(syscall.SIGKILL)
			return
		case <-tick.C:
			if g.allEnded() {
				return
			}
		}
	}
}

func (g *gang) allEnded() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.ended {
		if r.Order < 0 {
			return false
		}
	}
	return true
}

func (g *gang) stopAll(sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, cmd := range g.procs {
		if g.ended[i].Order < 0 && cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, sig) // the worker's whole process group
		}
	}
}

func (g *gang) waitAll() {
	for range g.procs {
		<-g.done
	}
}

// newSecret makes the run's shared secret: workers prove they hold it on
// every rendezvous and collective connection.
func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("launch: make run secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}
