package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Errors callers test for.
var (
	// ErrTaskNotFound: Recover found neither the shim, the worker nor an
	// exit record: the task is lost.
	ErrTaskNotFound = errors.New("task not found")
	// ErrExitUnknown: the shim vanished without recording the exit; the
	// worker's exit status cannot be known.
	ErrExitUnknown = errors.New("exit status unknown: shim died before the worker")
	// ErrDestroyed: the Task was destroyed.
	ErrDestroyed = errors.New("task destroyed")
	// ErrTaskRunning: Destroy without force on a running task.
	ErrTaskRunning = errors.New("task is still running")
	// ErrTaskExited: the worker has already exited.
	ErrTaskExited = errors.New("task has exited")
)

// RecoverableError marks a Start failure that may succeed when retried
// (a transient fork, pipe or FIFO failure). Failures not wrapped in it,
// such as a ConfigError, are permanent.
type RecoverableError struct{ Err error }

// Error implements error.
func (e *RecoverableError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *RecoverableError) Unwrap() error { return e.Err }

// IsRecoverable reports whether a Start error may succeed on retry.
func IsRecoverable(err error) bool {
	var r *RecoverableError
	return errors.As(err, &r)
}

func recoverable(format string, args ...any) error {
	return &RecoverableError{Err: fmt.Errorf(format, args...)}
}

// Option adjusts Start and Recover.
type Option func(*options)

type options struct {
	lookup UserLookup
	now    func() time.Time
}

// WithUserLookup replaces os/user.Lookup for Config.User.
func WithUserLookup(f UserLookup) Option { return func(o *options) { o.lookup = f } }

// WithClock replaces time.Now (StartedAt, Usage.Time, CPU intervals).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

func buildOptions(opts []Option) options {
	o := options{lookup: LookupUser, now: time.Now}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// LookupUser resolves a user name, or a numeric uid without a name, in the
// node's user database: how Config.User is read.
func LookupUser(name string) (*user.User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if byID, err2 := user.LookupId(name); err2 == nil {
			return byID, nil
		}
	}
	return u, err
}

// startWait bounds how long Start waits for the shim to report the worker.
const startWait = 30 * time.Second

// Task is a running (or finished) task: the in-memory handle around the
// persisted State. All methods are safe for concurrent use.
type Task struct {
	// Immutable after Start/Recover.
	st     State
	opts   options
	log    hclog.Logger
	mhz    float64            // per-core CPU MHz for Usage.TotalTicks
	cancel context.CancelFunc // stops the monitor (Destroy)
	done   chan struct{}      // closed once result/resultErr are final
	exited chan struct{}      // closed when the monitor has returned

	mu sync.Mutex
	// Guarded by mu.
	workerFD  int       // pidfd of the worker, -1 when unknown or closed
	shim      *exec.Cmd // the shim when this process started it, to reap
	result    ExitResult
	resultErr error
	destroyed bool

	statsMu sync.Mutex
	// Guarded by statsMu: the previous CPU sample for CPUPercent.
	prevAt                       time.Time
	prevUser, prevSys, prevTotal float64 // seconds of CPU
}

// Start validates cfg, opens the log FIFOs, and starts the shim, which
// starts the worker. It returns once the worker runs. ctx bounds only the
// start itself. Errors are *ConfigError (permanent), *RecoverableError
// (retry may help) or other permanent failures.
func Start(ctx context.Context, cfg Config, log hclog.Logger, opts ...Option) (*Task, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	o := buildOptions(opts)
	log = log.Named("executor").With("task_id", cfg.TaskID)
	r, err := validate(&cfg, o.lookup, os.Geteuid())
	if err != nil {
		return nil, err
	}
	dir, dev, ino, err := createStateDir(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	for _, f := range []string{exitFile, specFile} {
		if err := unlinkAt(dir, f); err != nil {
			return nil, fmt.Errorf("clear stale %s: %w", f, err)
		}
	}
	cgroup := ""
	if cfg.CgroupPath != "" {
		if cgroup, err = setupCgroup(cfg, log); err != nil {
			return nil, fmt.Errorf("set up cgroup: %w", err)
		}
	}
	t, err := startShim(ctx, cfg, r, stateDirOf{dir, dev, ino}, cgroup, o, log)
	if err != nil {
		_ = removeCgroup(context.Background(), cgroup)
		return nil, err
	}
	return t, nil
}

// stateDirOf is the state dir Start made, open, and its identity.
type stateDirOf struct {
	f        *os.File
	dev, ino uint64
}

func startShim(ctx context.Context, cfg Config, r resolved, sd stateDirOf, cgroup string, o options, log hclog.Logger) (*Task, error) {
	argv0 := cfg.Command
	if cfg.Argv0 != "" {
		argv0 = cfg.Argv0
	}
	spec := shimSpec{
		TaskID: cfg.TaskID, Path: r.Path, Args: append([]string{argv0}, cfg.Args...),
		Env: append([]string{}, cfg.Env...), Dir: r.Dir, Cred: r.Cred, Cgroup: cgroup,
	}
	if err := writeJSONAt(sd.f, specFile, spec); err != nil {
		return nil, fmt.Errorf("write shim spec: %w", err)
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	for _, p := range []string{cfg.StdoutPath, cfg.StderrPath} {
		f, err := openOutput(ctx, p)
		if err != nil {
			return nil, recoverable("open log output: %w", err)
		}
		files = append(files, f)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, recoverable("create status pipe: %w", err)
	}
	defer pr.Close()
	files = append(files, pw)

	// The shim gets its state dir as a descriptor, never by path (see
	// statedir.go).
	files = append(files, sd.f)
	shim := &exec.Cmd{
		Path:        cfg.ShimPath,
		Args:        []string{cfg.ShimPath, ShimArg},
		Env:         append(os.Environ(), cfg.ShimEnv...),
		Dir:         "/",
		ExtraFiles:  files, // fds 3, 4, 5, 6
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := shim.Start(); err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return nil, &ConfigError{Field: "ShimPath", Err: err}
		}
		return nil, recoverable("start shim: %w", err)
	}
	shimStart, _ := readProcStat(shim.Process.Pid)
	// Our copies of the FIFOs and the pipe's write end must go now: the
	// read below ends at the shim's message or its death.
	for _, f := range files {
		_ = f.Close()
	}
	files = nil

	st, err := readShimStatus(ctx, pr, func() { _ = shim.Process.Kill() })
	if err != nil || st.Err != "" || st.PID <= 0 {
		_ = shim.Process.Kill()
		_ = shim.Wait()
		if st.PID > 0 {
			// Start was abandoned after the worker started: take it down.
			killGroupIfSame(st.PID, st.StartTime)
			_ = killCgroup(cgroup)
		}
		switch {
		case err != nil:
			return nil, recoverable("wait for the shim to start the worker: %w", err)
		case st.NotFound:
			return nil, &ConfigError{Field: "Command", Err: fmt.Errorf("%s: %w", st.Err, ErrCommandNotFound)}
		case st.Permission:
			return nil, fmt.Errorf("shim: %s", st.Err)
		case st.Err != "":
			return nil, recoverable("shim: %s", st.Err)
		default:
			return nil, recoverable("shim reported no worker pid")
		}
	}
	state := State{
		TaskID: cfg.TaskID, ShimPID: shim.Process.Pid, ShimStartTime: shimStart.StartTime,
		PID: st.PID, PIDStartTime: st.StartTime, StateDir: cfg.StateDir, StateDirDev: sd.dev, StateDirIno: sd.ino,
		StartedAt: o.now(), Cgroup: cgroup, Config: cfg,
	}
	// The shim is our unreaped child, so its pid cannot be reused even if
	// it has already exited: open its pidfd without openPidfd's checks.
	shimFD, err := unix.PidfdOpen(state.ShimPID, 0)
	if err != nil {
		_ = shim.Process.Kill()
		_ = shim.Wait()
		return nil, recoverable("watch shim: %w", err)
	}
	workerFD, _ := openPidfd(state.PID, state.PIDStartTime)
	t := newTask(state, o, log, shimFD, workerFD, shim)
	log.Info("task started", "pid", state.PID, "shim_pid", state.ShimPID, "cgroup", cgroup)
	return t, nil
}

// readShimStatus reads the shim's one status line; EOF before it means the
// shim died. When ctx ends first, abort (which kills the shim) is called and
// whatever the shim managed to send is still returned with ctx's error, so
// the caller can clean up a worker that was started.
func readShimStatus(ctx context.Context, r io.Reader, abort func()) (shimStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, startWait)
	defer cancel()
	type reply struct {
		st  shimStatus
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		var rep reply
		line, err := bufio.NewReader(r).ReadBytes('\n')
		if len(line) == 0 && err != nil {
			rep.err = fmt.Errorf("shim exited before reporting: %w", err)
		} else {
			rep.err = json.Unmarshal(line, &rep.st)
		}
		ch <- rep
	}()
	select {
	case rep := <-ch:
		return rep.st, rep.err
	case <-ctx.Done():
		abort()
		// The shim is dead and the pipe's other ends are closed: the read
		// ends at once.
		rep := <-ch
		return rep.st, ctx.Err()
	}
}

// killGroupIfSame SIGKILLs process group pid if pid still is (or is the
// zombie of) the process that started at startTime; a zombie leader keeps
// its group id from being reused.
func killGroupIfSame(pid int, startTime uint64) {
	if st, err := readProcStat(pid); err == nil && st.StartTime == startTime {
		_ = unix.Kill(-pid, unix.SIGKILL)
	}
}

// Recover rebuilds a Task from persisted State after the plugin restarted.
// A live shim is watched again; a finished task reports its recorded exit;
// a worker whose shim vanished is watched until it exits (exit status
// unknown). With neither processes nor an exit record it returns an error
// wrapping ErrTaskNotFound.
func Recover(ctx context.Context, st State, log hclog.Logger, opts ...Option) (*Task, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	log = log.Named("executor").With("task_id", st.TaskID)
	// The worker's pid is also its process group, which Signal and Stop
	// address as -pid: pid 1 there would be kill(-1), every process.
	if st.StateDir == "" || st.PID <= 1 || st.ShimPID < 0 {
		return nil, fmt.Errorf("recover task %q: state has no state dir or a pid that cannot be a worker's: %w", st.TaskID, ErrTaskNotFound)
	}
	shimFD, err := openPidfd(st.ShimPID, st.ShimStartTime)
	if err != nil {
		return nil, fmt.Errorf("recover task %q: %w", st.TaskID, err)
	}
	workerFD, err := openPidfd(st.PID, st.PIDStartTime)
	if err != nil {
		closeFD(shimFD)
		return nil, fmt.Errorf("recover task %q: %w", st.TaskID, err)
	}
	if shimFD < 0 && workerFD < 0 {
		if _, ok, err := readExitFile(st); !ok {
			if err == nil {
				err = errors.New("no exit record")
			}
			return nil, fmt.Errorf("recover task %q: shim %d and worker %d are gone: %v: %w",
				st.TaskID, st.ShimPID, st.PID, err, ErrTaskNotFound)
		}
	}
	log.Info("task recovered", "pid", st.PID, "shim_pid", st.ShimPID, "shim_alive", shimFD >= 0, "worker_alive", workerFD >= 0)
	return newTask(st, o, log, shimFD, workerFD, nil), nil
}

func newTask(st State, o options, log hclog.Logger, shimFD, workerFD int, shim *exec.Cmd) *Task {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Task{
		st: st, opts: o, log: log, mhz: hostCPUMHz(), cancel: cancel,
		done: make(chan struct{}), exited: make(chan struct{}),
		workerFD: workerFD, shim: shim,
	}
	go t.monitor(ctx, shimFD)
	return t
}

func closeFD(fd int) {
	if fd >= 0 {
		_ = unix.Close(fd)
	}
}

// monitor waits for the shim (or, without one, the worker), then settles
// the result. It owns shimFD. It returns when ctx is cancelled (Destroy).
func (t *Task) monitor(ctx context.Context, shimFD int) {
	defer close(t.exited)
	defer closeFD(shimFD)
	res, err := t.awaitExit(ctx, shimFD)
	t.mu.Lock()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = ErrDestroyed
	}
	t.result, t.resultErr = res, err
	closeFD(t.workerFD)
	t.workerFD = -1
	t.mu.Unlock()
	close(t.done)
	if err != nil {
		t.log.Warn("task ended without a recorded exit", "error", err)
	} else {
		t.log.Info("task exited", "exit_code", res.ExitCode, "signal", res.Signal, "oom_killed", res.OOMKilled)
	}
}

func (t *Task) awaitExit(ctx context.Context, shimFD int) (ExitResult, error) {
	if shimFD >= 0 {
		if err := waitPidfd(ctx, shimFD); err != nil {
			return ExitResult{}, err
		}
		t.mu.Lock()
		shim := t.shim
		t.mu.Unlock()
		if shim != nil {
			_ = shim.Wait() // reap: it has exited, this does not block
		}
	}
	res, ok, err := readExitFile(t.st)
	if err != nil {
		return ExitResult{}, err
	}
	if ok {
		return res, nil
	}
	// The shim is gone without a record. Outlive the worker, then say so.
	t.mu.Lock()
	wfd, err := dupFD(t.workerFD)
	t.mu.Unlock()
	if err != nil {
		return ExitResult{}, err
	}
	if wfd >= 0 {
		t.log.Warn("shim gone while the worker runs; waiting for the worker", "pid", t.st.PID)
		err := waitPidfd(ctx, wfd)
		closeFD(wfd)
		if err != nil {
			return ExitResult{}, err
		}
	}
	killGroupIfSame(t.st.PID, t.st.PIDStartTime)
	_ = killCgroup(t.st.Cgroup)
	return ExitResult{ExitCode: -1, Err: ErrExitUnknown.Error(), At: t.opts.now()}, ErrExitUnknown
}

func dupFD(fd int) (int, error) {
	if fd < 0 {
		return -1, nil
	}
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("dup pidfd: %w", err)
	}
	return n, nil
}

// State returns the persistable state.
func (t *Task) State() State { return t.st }

// Wait blocks until the worker has exited (and the exit is recorded) or ctx
// is done. It may be called any number of times, concurrently.
func (t *Task) Wait(ctx context.Context) (ExitResult, error) {
	select {
	case <-t.done:
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.result, t.resultErr
	case <-ctx.Done():
		return ExitResult{}, ctx.Err()
	}
}

func (t *Task) isDone() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the worker process (not its group).
func (t *Task) Signal(sig syscall.Signal) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.workerFD < 0 || pidfdExited(t.workerFD) {
		return fmt.Errorf("signal %v to task %q: %w", sig, t.st.TaskID, ErrTaskExited)
	}
	if err := unix.PidfdSendSignal(t.workerFD, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("signal %v to task %q: %w", sig, t.st.TaskID, ErrTaskExited)
		}
		return fmt.Errorf("signal %v to task %q: %w", sig, t.st.TaskID, err)
	}
	return nil
}

// signalGroup sends sig to the worker's whole process group, and SIGKILL
// also to its cgroup. It does nothing once the worker has exited (the
// shim then cleans up the group itself).
func (t *Task) signalGroup(sig syscall.Signal) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.workerFD < 0 || pidfdExited(t.workerFD) {
		return nil
	}
	// The open pidfd keeps the leader's pid, hence the group id, from
	// being reused while it is a zombie; it is not reaped before the
	// shim killed the group.
	err := unix.Kill(-t.st.PID, sig)
	if sig == unix.SIGKILL {
		_ = killCgroup(t.st.Cgroup)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %v to process group %d: %w", sig, t.st.PID, err)
	}
	return nil
}

// Stop sends sig (SIGTERM when 0) to the worker's process group, waits up to
// grace for the exit, then SIGKILLs the group (and cgroup) and waits for the
// exit to be recorded or ctx to end.
func (t *Task) Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	if sig == 0 {
		sig = unix.SIGTERM
	}
	if t.isDone() {
		return nil
	}
	if err := t.signalGroup(sig); err != nil {
		return fmt.Errorf("stop task %q: %w", t.st.TaskID, err)
	}
	if sig != unix.SIGKILL && grace > 0 {
		timer := time.NewTimer(grace)
		select {
		case <-t.done:
			timer.Stop()
			return nil
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("stop task %q: %w", t.st.TaskID, ctx.Err())
		case <-timer.C:
		}
		t.log.Info("grace period over; killing the process group", "grace", grace)
		if err := t.signalGroup(unix.SIGKILL); err != nil {
			return fmt.Errorf("stop task %q: %w", t.st.TaskID, err)
		}
	}
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop task %q: wait for exit: %w", t.st.TaskID, ctx.Err())
	}
}

// Destroy frees the task: with force a running task is killed first,
// without force a running task is an error wrapping ErrTaskRunning. It
// removes the cgroup and StateDir. Calling it twice is harmless.
func (t *Task) Destroy(ctx context.Context, force bool) error {
	if !t.isDone() {
		if !force {
			return fmt.Errorf("destroy task %q: %w", t.st.TaskID, ErrTaskRunning)
		}
		if err := t.Stop(ctx, unix.SIGKILL, 0); err != nil {
			return fmt.Errorf("destroy task %q: %w", t.st.TaskID, err)
		}
	}
	t.cancel()
	select {
	case <-t.exited:
	case <-ctx.Done():
		return fmt.Errorf("destroy task %q: %w", t.st.TaskID, ctx.Err())
	}
	t.mu.Lock()
	t.destroyed = true
	t.mu.Unlock()
	if err := removeCgroup(ctx, t.st.Cgroup); err != nil {
		return fmt.Errorf("destroy task %q: %w", t.st.TaskID, err)
	}
	if err := removeStateDir(t.st.StateDir, t.st.StateDirDev, t.st.StateDirIno); err != nil {
		return fmt.Errorf("destroy task %q: remove state dir: %w", t.st.TaskID, err)
	}
	return nil
}
