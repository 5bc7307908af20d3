package driver

import (
	"context"
	"encoding/json"
	"io"
	"syscall"
	"time"
)

// Runner starts task processes and reattaches to them. The production
// Runner (ExecutorRunner) uses package executor's supervisor shim so that
// tasks outlive the plugin process; tests of the gRPC layer use a fake.
type Runner interface {
	// Start launches spec and returns once the process runs.
	Start(ctx context.Context, spec ProcessSpec) (Process, error)
	// Recover reattaches to a process from the state a Process saved.
	Recover(ctx context.Context, state json.RawMessage) (Process, error)
}

// ProcessSpec is what the driver asks a Runner to run.
type ProcessSpec struct {
	TaskID     string
	Command    string
	Argv0      string // the program's argv[0]; "" is Command
	Args       []string
	Env        []string // KEY=VALUE
	Dir        string
	User       string
	StdoutPath string // FIFO or file the process's stdout goes to
	StderrPath string
	StateDir   string // where the runner may keep files for recovery
	CgroupPath string
	CPUShares  int64
	MemoryMB   int64
	// MemoryMaxMB is the hard memory limit when oversubscription is on.
	MemoryMaxMB int64
}

// Process is one running (or exited) task process.
type Process interface {
	// PID is the task process's id.
	PID() int
	// StartedAt is when the process started.
	StartedAt() time.Time
	// SaveState returns what Recover needs to reattach.
	SaveState() (json.RawMessage, error)
	// Wait blocks until the process exits or ctx ends.
	Wait(ctx context.Context) (ExitStatus, error)
	// Signal sends sig to the process.
	Signal(sig syscall.Signal) error
	// Stop sends sig, waits up to grace, then kills the process group.
	Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) error
	// Destroy frees what the runner holds; force kills a running process.
	Destroy(ctx context.Context, force bool) error
	// Stats samples CPU and memory usage.
	Stats(ctx context.Context) (Usage, error)
	// Exec runs cmd beside the task and collects its output.
	Exec(ctx context.Context, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int, err error)
	// ExecStreaming runs cmd beside the task with streamed I/O.
	ExecStreaming(ctx context.Context, cmd []string, tty bool, stdin io.Reader, stdout, stderr io.Writer, resize <-chan TermSize) (exitCode int, err error)
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	ExitCode  int
	Signal    int
	OOMKilled bool
	Err       string
	At        time.Time
}

// Usage is one resource usage sample of a task.
type Usage struct {
	CPUPercent, UserMode, SystemMode, TotalTicks float64
	RSS, Swap, MaxUsage                          uint64
	// Measured names the measured fields in Nomad's Go-side spelling
	// ("RSS", "Percent", "User Mode", ...).
	Measured []string
	Time     time.Time
}

// TermSize is a terminal size change for ExecStreaming.
type TermSize struct {
	Height, Width int
}
