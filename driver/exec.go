package driver

import (
	"context"
	"io"
	"sync"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Running a command inside a task (nomad alloc exec).

// ExecTask implements the Driver service.
func (d *Driver) ExecTask(ctx context.Context, req *drivers.ExecTaskRequest) (*drivers.ExecTaskResponse, error) {
	h, err := d.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if len(req.GetCommand()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "exec needs a command")
	}
	stdout, stderr, code, err := h.proc.Exec(ctx, req.GetCommand(), req.GetTimeout().AsDuration())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "exec in task: %v", err)
	}
	return &drivers.ExecTaskResponse{Stdout: stdout, Stderr: stderr, Result: &drivers.ExitResult{ExitCode: int32(code)}}, nil
}

// ExecTaskStreaming implements the Driver service (nomad alloc exec).
func (d *Driver) ExecTaskStreaming(stream drivers.Driver_ExecTaskStreamingServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	setup := first.GetSetup()
	if setup == nil {
		return status.Error(codes.InvalidArgument, "first exec message must carry setup")
	}
	h, err := d.task(setup.GetTaskId())
	if err != nil {
		return err
	}
	if len(setup.GetCommand()) == 0 {
		return status.Error(codes.InvalidArgument, "exec needs a command")
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()

	stdinR, stdinW := io.Pipe()
	resize := make(chan TermSize, 4)
	go func() {
		defer stdinW.Close()
		pump := func(m *drivers.ExecTaskStreamingRequest) bool {
			if sz := m.GetTtySize(); sz != nil {
				select {
				case resize <- TermSize{Height: int(sz.GetHeight()), Width: int(sz.GetWidth())}:
				case <-ctx.Done():
					return false
				}
			}
			if in := m.GetStdin(); in != nil {
				if len(in.GetData()) > 0 {
					if _, err := stdinW.Write(in.GetData()); err != nil {
						return false
					}
				}
				if in.GetClose() {
					return false
				}
			}
			return true
		}
		if !pump(first) {
			return
		}
		for {
			m, err := stream.Recv()
			if err != nil || !pump(m) {
				return
			}
		}
	}()

	var sendMu sync.Mutex
	send := func(r *drivers.ExecTaskStreamingResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(r)
	}
	stdout := &streamWriter{send: send, stderr: false}
	stderr := &streamWriter{send: send, stderr: true}
	code, err := h.proc.ExecStreaming(ctx, setup.GetCommand(), setup.GetTty(), stdinR, stdout, stderr, resize)
	stdinR.Close()
	if err != nil {
		return status.Errorf(codes.Internal, "exec in task: %v", err)
	}
	return send(&drivers.ExecTaskStreamingResponse{Exited: true, Result: &drivers.ExitResult{ExitCode: int32(code)}})
}

// streamWriter sends what is written as exec output messages.
type streamWriter struct {
	send   func(*drivers.ExecTaskStreamingResponse) error
	stderr bool
}

func (w *streamWriter) Write(p []byte) (int, error) {
	op := &drivers.ExecTaskStreamingIOOperation{Data: append([]byte(nil), p...)}
	r := &drivers.ExecTaskStreamingResponse{Stdout: op}
	if w.stderr {
		r = &drivers.ExecTaskStreamingResponse{Stderr: op}
	}
	if err := w.send(r); err != nil {
		return 0, err
	}
	return len(p), nil
}

// mergeCtx is a context that ends when either a or b ends.
func mergeCtx(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return ctx, func() { stop(); cancel() }
}
