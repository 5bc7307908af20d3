package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TermSize is a terminal size for ExecStreaming's resize events.
type TermSize struct {
	Height, Width uint16
}

// execWaitDelay bounds how long an exec waits for its output pipes after
// the command exited (background children may hold them).
const execWaitDelay = 2 * time.Second

// prepareExec builds the command in the task's environment: its Env, Dir,
// user and cgroup, leading a new process group that ctx cancellation kills.
// The returned cleanup closes the cgroup descriptor after Start.
func (t *Task) prepareExec(ctx context.Context, argv []string, setsid bool) (*exec.Cmd, func(), error) {
	t.mu.Lock()
	destroyed := t.destroyed
	t.mu.Unlock()
	if destroyed {
		return nil, nil, fmt.Errorf("exec in task %q: %w", t.st.TaskID, ErrDestroyed)
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, nil, fmt.Errorf("exec in task %q: empty command", t.st.TaskID)
	}
	cfg := t.st.Config
	dir, cred, err := environment(&cfg, t.opts.lookup, os.Geteuid())
	if err != nil {
		return nil, nil, fmt.Errorf("exec in task %q: %w", t.st.TaskID, err)
	}
	path, err := lookCommand(argv[0], dir, cfg.Env)
	if err != nil {
		return nil, nil, fmt.Errorf("exec in task %q: %w", t.st.TaskID, err)
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = append([]string{}, cfg.Env...)
	cmd.Dir = dir
	cmd.WaitDelay = execWaitDelay
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: !setsid, Setsid: setsid}
	if c := cred; c != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: c.Groups}
	}
	cmd.Cancel = func() error {
		return unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	cleanup := func() {}
	if t.st.Cgroup != "" {
		if cg, err := os.Open(t.st.Cgroup); err == nil {
			cmd.SysProcAttr.UseCgroupFD = true
			cmd.SysProcAttr.CgroupFD = int(cg.Fd())
			cleanup = func() { _ = cg.Close() }
		}
	}
	return cmd, cleanup, nil
}

// exitCodeOf maps a Wait error to an exit code (128+signal when signalled).
// Errors other than a non-zero exit are returned.
func exitCodeOf(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exitResultOf(ee.ProcessState, time.Time{}).ExitCode, nil
	}
	return -1, err
}

// Exec runs cmd in the task's environment (Env, Dir, user, cgroup) and
// returns its output and exit code. After timeout (or when ctx ends) the
// command's process group is killed and the error wraps the context error.
func (t *Task) Exec(ctx context.Context, argv []string, timeout time.Duration) (stdout, stderr []byte, exitCode int, err error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd, cleanup, err := t.prepareExec(ctx, argv, false)
	if err != nil {
		return nil, nil, -1, err
	}
	var outBuf, errBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &errBuf
	err = cmd.Start()
	cleanup()
	if err != nil {
		return nil, nil, -1, fmt.Errorf("exec %q in task %q: %w", argv[0], t.st.TaskID, err)
	}
	werr := cmd.Wait()
	if ctx.Err() != nil {
		return outBuf.Bytes(), errBuf.Bytes(), -1, fmt.Errorf("exec %q in task %q: %w", argv[0], t.st.TaskID, ctx.Err())
	}
	code, err := exitCodeOf(werr)
	if err != nil {
		return outBuf.Bytes(), errBuf.Bytes(), code, fmt.Errorf("exec %q in task %q: %w", argv[0], t.st.TaskID, err)
	}
	return outBuf.Bytes(), errBuf.Bytes(), code, nil
}

// ExecStreaming runs cmd in the task's environment with streamed I/O. With
// tty, the command gets a new session whose controlling terminal is a
// pseudo-terminal: stdin goes to it, its output comes out on stdout (stderr
// is unused), and sizes from resize are applied. Ending ctx kills the
// command. A goroutine copying from stdin ends when stdin returns EOF or an
// error, or at its next read after the command has exited.
func (t *Task) ExecStreaming(ctx context.Context, argv []string, tty bool, stdin io.Reader, stdout, stderr io.Writer, resize <-chan TermSize) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd, cleanup, err := t.prepareExec(ctx, argv, tty)
	if err != nil {
		return -1, err
	}
	if !tty {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		err = cmd.Start()
		cleanup()
		if err != nil {
			return -1, fmt.Errorf("exec %q in task %q: %w", argv[0], t.st.TaskID, err)
		}
		go drainResize(ctx, resize, nil)
		return t.finishExec(ctx, argv[0], cmd.Wait())
	}

	if stdout == nil {
		stdout = io.Discard
	}
	master, slave, err := openPTY()
	if err != nil {
		cleanup()
		return -1, fmt.Errorf("exec %q in task %q: %w", argv[0], t.st.TaskID, err)
	}
	defer master.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr.Setctty = true
	cmd.SysProcAttr.Ctty = 0 // the child's fd 0
	err = cmd.Start()
	cleanup()
	_ = slave.Close()
	if err != nil {
		return -1, fmt.Errorf("exec %q in task %q: %w", argv[0], t.st.TaskID, err)
	}
	go drainResize(ctx, resize, master)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Ends with EIO once every holder of the terminal has gone, or when
		// the master is closed below.
		_, _ = io.Copy(stdout, master)
	}()
	if stdin != nil {
		go func() { _, _ = io.Copy(master, stdin) }()
	}
	werr := cmd.Wait()
	waitOrClose(&wg, master, execWaitDelay)
	return t.finishExec(ctx, argv[0], werr)
}

// waitOrClose waits for the output copier; after delay it closes f to end
// it (a background process may still hold the terminal).
func waitOrClose(wg *sync.WaitGroup, f *os.File, delay time.Duration) {
	copied := make(chan struct{})
	go func() { wg.Wait(); close(copied) }()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-copied:
	case <-timer.C:
		_ = f.Close()
		<-copied
	}
}

func (t *Task) finishExec(ctx context.Context, name string, werr error) (int, error) {
	if ctx.Err() != nil {
		return -1, fmt.Errorf("exec %q in task %q: %w", name, t.st.TaskID, ctx.Err())
	}
	code, err := exitCodeOf(werr)
	if err != nil {
		return code, fmt.Errorf("exec %q in task %q: %w", name, t.st.TaskID, err)
	}
	return code, nil
}

// drainResize applies terminal sizes to pty (or discards them when nil)
// until resize is closed or ctx ends.
func drainResize(ctx context.Context, resize <-chan TermSize, pty *os.File) {
	if resize == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case sz, ok := <-resize:
			if !ok {
				return
			}
			if pty != nil {
				_ = setWinsize(pty, sz)
			}
		}
	}
}

// openPTY allocates a pseudo-terminal pair through /dev/ptmx. The master
// is non-blocking under Go's poller, so closing it ends a pending Read.
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		_ = unix.Close(fd)
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		_ = unix.Close(fd)
		return nil, nil, fmt.Errorf("get pty number: %w", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		_ = unix.Close(fd)
		return nil, nil, fmt.Errorf("open pty slave: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), s, nil
}

// setWinsize sets the terminal size of the pty master.
func setWinsize(pty *os.File, sz TermSize) error {
	rc, err := pty.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Height, Col: sz.Width})
	})
	if err != nil {
		return err
	}
	return ioErr
}
