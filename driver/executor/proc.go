package executor

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

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
// It sleeps in poll(2) on the pidfd and an eventfd that ctx's cancellation
// writes to, so it wakes at once either way and never spins.
func waitPidfd(ctx context.Context, fd int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	woken := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(woken)
		one := [8]byte{1} // host-endian 1 on little-endian; any non-zero value wakes
		_, _ = unix.Write(efd, one[:])
	})
	defer func() {
		if !stop() {
			<-woken // the writer runs: let it finish before efd is closed
		}
		_ = unix.Close(efd)
	}()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(efd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll pidfd: %w", err)
		}
		if fds[0].Revents != 0 {
			return nil
		}
		if fds[1].Revents != 0 {
			return ctx.Err()
		}
	}
}
