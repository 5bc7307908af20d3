package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// File descriptors Start hands the shim (ExtraFiles start at 3).
const (
	shimFDStdout = 3
	shimFDStderr = 4
	shimFDStatus = 5
	shimFDState  = 6 // the state dir (statedir.go)
)

// ShimMain runs the supervisor shim and returns the process exit code. The
// driver's main calls os.Exit(executor.ShimMain(os.Args[1:])) when
// os.Args[1] == ShimArg (a leading ShimArg in args is skipped).
//
// The shim runs in its own session, so it outlives the plugin. It starts the
// worker as the leader of a new process group with the log FIFOs it
// inherited as stdout and stderr, reports the worker's pid to Start over a
// pipe, waits for the worker, kills what is left of its process group and
// cgroup, and records the ExitResult in StateDir atomically.
func ShimMain(args []string) int {
	if len(args) > 0 && args[0] == ShimArg {
		args = args[1:]
	}
	if len(args) != 0 {
		fmt.Fprintf(os.Stderr, "usage: %s (its state dir open as descriptor %d)\n", ShimArg, shimFDState)
		return 2
	}
	dir := os.NewFile(shimFDState, "state")
	lfd, err := unix.Openat(shimFDState, logFile, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: open log: %v\n", ShimArg, err)
		return 1
	}
	lf := os.NewFile(uintptr(lfd), logFile)
	defer lf.Close()
	log := hclog.New(&hclog.LoggerOptions{Name: "executor-shim", Output: lf, JSONFormat: true, Level: hclog.Debug})
	if err := runShim(dir, log); err != nil {
		log.Error("shim failed", "error", err)
		return 1
	}
	return 0
}

func runShim(dir *os.File, log hclog.Logger) error {
	// The shim must not die of the hang-ups and interrupts meant for the
	// plugin. Catching (not ignoring) them matters: an ignored signal would
	// stay ignored in the worker across exec.
	quiet := make(chan os.Signal, 1)
	signal.Notify(quiet, syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	defer signal.Stop(quiet)

	for _, fd := range []int{shimFDStdout, shimFDStderr, shimFDStatus, shimFDState} {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("descriptor %d from the plugin: %w", fd, err)
		}
	}
	// Descriptors inherited without close-on-exec (ours, and whatever the
	// plugin's own parent leaked) must not reach the worker: it gets only
	// what the shim hands it explicitly.
	closeOnExecFrom(3)
	status := os.NewFile(shimFDStatus, "status")
	stdout := os.NewFile(shimFDStdout, "stdout")
	stderr := os.NewFile(shimFDStderr, "stderr")
	defer status.Close()

	var spec shimSpec
	b, err := readBoundedAt(dir, specFile, maxSpecFile)
	if err == nil {
		spec, err = decodeShimSpec(b)
	}
	if err != nil {
		sendStatus(status, shimStatus{Err: fmt.Sprintf("read spec: %v", err)})
		return fmt.Errorf("read spec: %w", err)
	}
	log = log.With("task_id", spec.TaskID)

	cmd := &exec.Cmd{
		Path:        spec.Path,
		Args:        spec.Args,
		Env:         append([]string{}, spec.Env...),
		Dir:         spec.Dir,
		Stdout:      stdout,
		Stderr:      stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if c := spec.Cred; c != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: c.Groups}
	}
	if spec.Cgroup != "" {
		cg, err := os.Open(spec.Cgroup)
		if err != nil {
			sendStatus(status, shimStatus{Err: fmt.Sprintf("open cgroup: %v", err)})
			return fmt.Errorf("open cgroup: %w", err)
		}
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cg.Fd())
	}
	// SIGTERM to the shim itself (e.g. a host shutdown) goes to the worker.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)

	if err := cmd.Start(); err != nil {
		st := shimStatus{Err: fmt.Sprintf("start %s: %v", spec.Path, err)}
		st.NotFound = errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOEXEC)
		st.Permission = errors.Is(err, fs.ErrPermission)
		sendStatus(status, st)
		return fmt.Errorf("start worker: %w", err)
	}
	pid := cmd.Process.Pid
	// Only the worker keeps the log descriptors: closing ours lets the
	// reader see EOF once the worker's process group is gone.
	_ = stdout.Close()
	_ = stderr.Close()
	var startTime uint64
	if ps, err := readProcStat(pid); err == nil {
		startTime = ps.StartTime
	}
	sendStatus(status, shimStatus{PID: pid, StartTime: startTime})
	_ = status.Close()
	log.Info("worker started", "pid", pid, "path", spec.Path)

	waited := make(chan error, 1)
	go func() { waited <- waitNoReap(pid) }()
	for done := false; !done; {
		select {
		case s := <-sigs:
			_ = unix.Kill(-pid, s.(syscall.Signal))
		case <-quiet:
		case err := <-waited:
			if err != nil {
				log.Warn("waitid without reaping failed", "error", err)
			}
			done = true
		}
	}
	// The leader is a zombie, so its pgid cannot be reused yet: kill the
	// rest of the group, then the cgroup, then reap.
	_ = unix.Kill(-pid, unix.SIGKILL)
	if err := killCgroup(spec.Cgroup); err != nil {
		log.Warn("kill cgroup", "error", err)
	}
	_ = cmd.Wait()
	res := exitResultOf(cmd.ProcessState, time.Now())
	if res.Signal == int(unix.SIGKILL) && cgroupOOMKills(spec.Cgroup) > 0 {
		res.OOMKilled = true
	}
	if err := writeJSONAt(dir, exitFile, res); err != nil {
		return fmt.Errorf("record exit: %w", err)
	}
	log.Info("worker exited", "pid", pid, "exit_code", res.ExitCode, "signal", res.Signal, "oom_killed", res.OOMKilled)
	return nil
}

// waitNoReap blocks until pid exits, leaving it a zombie (WNOWAIT).
func waitNoReap(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// exitResultOf converts a finished process's state into an ExitResult.
func exitResultOf(ps *os.ProcessState, at time.Time) ExitResult {
	res := ExitResult{At: at}
	if ps == nil {
		res.ExitCode, res.Err = -1, "no process state"
		return res
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		res.ExitCode = ps.ExitCode()
		return res
	}
	switch {
	case ws.Signaled():
		res.Signal = int(ws.Signal())
		res.ExitCode = 128 + res.Signal
	default:
		res.ExitCode = ws.ExitStatus()
	}
	return res
}

func sendStatus(w *os.File, st shimStatus) {
	b, _ := json.Marshal(st)
	_, _ = w.Write(append(b, '\n'))
}

// closeOnExecFrom marks every descriptor >= low close-on-exec: with
// close_range(2) where the kernel has it (5.11+), else one by one from
// /proc/self/fd.
func closeOnExecFrom(low int) {
	if unix.CloseRange(uint(low), ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= low {
			syscall.CloseOnExec(fd)
		}
	}
}
