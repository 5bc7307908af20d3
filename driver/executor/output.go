package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fifoRetry is how often openOutput retries a FIFO that has no reader yet.
const fifoRetry = 20 * time.Millisecond

// openOutput opens a log destination for writing in the plugin process:
// "" is /dev/null, a FIFO waits (until ctx is done) for its reader (Nomad's
// logmon), anything else is created or appended to. The file is blocking.
func openOutput(ctx context.Context, path string) (*os.File, error) {
	if path == "" {
		path = os.DevNull
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	case err != nil:
		return nil, err
	case fi.Mode()&fs.ModeNamedPipe == 0:
		return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0)
	}
	// A FIFO: a non-blocking open for writing fails with ENXIO until a
	// reader has it open. Retrying keeps the wait cancellable.
	for {
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err == nil {
			if err := unix.SetNonblock(fd, false); err != nil {
				_ = unix.Close(fd)
				return nil, fmt.Errorf("make fifo blocking: %w", err)
			}
			return os.NewFile(uintptr(fd), path), nil
		}
		if !errors.Is(err, unix.ENXIO) && !errors.Is(err, unix.EINTR) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		t := time.NewTimer(fifoRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("wait for a reader on %s: %w", path, ctx.Err())
		case <-t.C:
		}
	}
}
