package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// pollEvery bounds how late a wait on a pidfd notices a cancelled context.
const pollEvery = 50 * time.Millisecond

// openPidfd returns a pidfd for pid if that process still is the one that
// started at startTime (0 = do not check). It returns -1 and no error when
// the process is gone or the pid was reused.
func openPidfd(pid int, startTime uint64) (int, error) {
	if pid <= 0 {
		return -1, nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	// The pidfd pins the process we opened; checking the start time after
	// opening it proves the pidfd names the process we recorded.
	st, err := readProcStat(pid)
	if err != nil || (startTime != 0 && st.StartTime != startTime) || st.State == 'Z' || st.State == 'X' {
		_ = unix.Close(fd)
		return -1, nil
	}
	return fd, nil
}

// pidfdExited reports whether the process behind fd has terminated.
func pidfdExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// waitPidfd blocks until the process behind fd terminates or ctx is done.
func waitPidfd(ctx context.Context, fd int) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(pollEvery/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
