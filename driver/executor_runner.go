package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/driver/executor"
)

// ExecutorRunner is the production Runner: package executor's supervisor
// shim runs each task in its own session, so tasks outlive the plugin.
type ExecutorRunner struct {
	// ShimPath is the binary re-executed with executor.ShimArg (the driver
	// binary itself).
	ShimPath string
	// Logger receives the executor's logs.
	Logger hclog.Logger
}

// Start implements Runner.
func (r ExecutorRunner) Start(ctx context.Context, s ProcessSpec) (Process, error) {
	t, err := executor.Start(ctx, executor.Config{
		TaskID:      s.TaskID,
		Command:     s.Command,
		Argv0:       s.Argv0,
		Args:        s.Args,
		Env:         s.Env,
		Dir:         s.Dir,
		User:        s.User,
		StdoutPath:  s.StdoutPath,
		StderrPath:  s.StderrPath,
		StateDir:    s.StateDir,
		CgroupPath:  s.CgroupPath,
		CPUShares:   s.CPUShares,
		MemoryMB:    s.MemoryMB,
		MemoryMaxMB: s.MemoryMaxMB,
		ShimPath:    r.ShimPath,
	}, r.Logger)
	if err != nil {
		if executor.IsRecoverable(err) {
			return nil, Retryable(err)
		}
		return nil, err
	}
	return executorProcess{t}, nil
}

// Recover implements Runner.
func (r ExecutorRunner) Recover(ctx context.Context, state json.RawMessage) (Process, error) {
	var st executor.State
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("decode executor state: %w", err)
	}
	t, err := executor.Recover(ctx, st, r.Logger)
	if err != nil {
		return nil, err
	}
	return executorProcess{t}, nil
}

type executorProcess struct{ t *executor.Task }

func (p executorProcess) PID() int             { return p.t.State().PID }
func (p executorProcess) StartedAt() time.Time { return p.t.State().StartedAt }

func (p executorProcess) SaveState() (json.RawMessage, error) {
	return json.Marshal(p.t.State())
}

func (p executorProcess) Wait(ctx context.Context) (ExitStatus, error) {
	r, err := p.t.Wait(ctx)
	if err != nil {
		return ExitStatus{}, err
	}
	return ExitStatus{ExitCode: r.ExitCode, Signal: r.Signal, OOMKilled: r.OOMKilled, Err: r.Err, At: r.At}, nil
}

func (p executorProcess) Signal(sig syscall.Signal) error { return p.t.Signal(sig) }

func (p executorProcess) Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	return p.t.Stop(ctx, sig, grace)
}

func (p executorProcess) Destroy(ctx context.Context, force bool) error {
	return p.t.Destroy(ctx, force)
}

func (p executorProcess) Stats(ctx context.Context) (Usage, error) {
	u, err := p.t.Stats(ctx)
	if err != nil {
		return Usage{}, err
	}
	return Usage{
		CPUPercent: u.CPUPercent, UserMode: u.UserMode, SystemMode: u.SystemMode, TotalTicks: u.TotalTicks,
		RSS: u.RSS, Swap: u.Swap, MaxUsage: u.MaxUsage, Measured: u.Measured, Time: u.Time,
	}, nil
}

func (p executorProcess) Exec(ctx context.Context, cmd []string, timeout time.Duration) ([]byte, []byte, int, error) {
	return p.t.Exec(ctx, cmd, timeout)
}

func (p executorProcess) ExecStreaming(ctx context.Context, cmd []string, tty bool, stdin io.Reader, stdout, stderr io.Writer, resize <-chan TermSize) (int, error) {
	ch := make(chan executor.TermSize)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sz, ok := <-resize:
				if !ok {
					return
				}
				select {
				case ch <- executor.TermSize{Height: uint16(sz.Height), Width: uint16(sz.Width)}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return p.t.ExecStreaming(ctx, cmd, tty, stdin, stdout, stderr, ch)
}

// retryableError marks a Runner.Start failure that may succeed when Nomad
// retries the task.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// Retryable marks err as a start failure worth retrying.
func Retryable(err error) error { return &retryableError{err: err} }

// IsRetryable reports whether err was marked with Retryable.
func IsRetryable(err error) bool {
	var r *retryableError
	return errors.As(err, &r)
}
