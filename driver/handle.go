package driver

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
)

// taskHandle is the driver's in-memory view of one task. What survives a
// plugin restart lives in taskState (state.go); this holds the live parts.
type taskHandle struct {
	// Immutable after construction.
	id        string
	taskCfg   *drivers.TaskConfig
	config    TaskConfig
	proc      Process
	startedAt time.Time
	logger    hclog.Logger
	gpuUUIDs  []string // GPUs reserved for the task (for GPU stats)
	// done is closed once the exit status is recorded.
	done chan struct{}
	// cancel stops the wait and events goroutines (DestroyTask).
	cancel context.CancelFunc

	mu sync.Mutex
	// Guarded by mu.
	exit        *ExitStatus
	completedAt time.Time
}

func newTaskHandle(id string, tc *drivers.TaskConfig, cfg TaskConfig, proc Process, startedAt time.Time, logger hclog.Logger) *taskHandle {
	return &taskHandle{
		id:        id,
		taskCfg:   tc,
		config:    cfg,
		proc:      proc,
		startedAt: startedAt,
		logger:    logger,
		gpuUUIDs:  visibleGPUs(tc),
		done:      make(chan struct{}),
	}
}

// watch waits for the process to exit and records how. It runs in its own
// goroutine until the exit or until ctx ends (DestroyTask, plugin exit).
func (h *taskHandle) watch(ctx context.Context, now func() time.Time) {
	res, err := h.proc.Wait(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		res = ExitStatus{ExitCode: -1, Err: err.Error(), At: now()}
	}
	if res.At.IsZero() {
		res.At = now()
	}
	h.mu.Lock()
	h.exit = &res
	h.completedAt = res.At
	h.mu.Unlock()
	close(h.done)
	h.logger.Debug("task exited", "exit_code", res.ExitCode, "signal", res.Signal, "oom", res.OOMKilled, "err", res.Err)
}

// exitStatus returns the exit status, or nil while the task runs.
func (h *taskHandle) exitStatus() *ExitStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.exit == nil {
		return nil
	}
	e := *h.exit
	return &e
}

func (h *taskHandle) running() bool { return h.exitStatus() == nil }

// status is InspectTask's view of the task.
func (h *taskHandle) status() (drivers.TaskState, time.Time, *ExitStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.exit == nil {
		return drivers.TaskState_RUNNING, time.Time{}, nil
	}
	e := *h.exit
	return drivers.TaskState_EXITED, h.completedAt, &e
}
