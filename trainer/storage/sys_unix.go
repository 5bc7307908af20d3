//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package storage

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockRun takes the exclusive writer lock of a run. flock(2) locks belong
// to the open file, so the kernel drops them when the process dies, and on
// NFSv4 they are held by the server.
func lockRun(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening writer lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return f, nil
}

// lockWait takes an exclusive lock on path, waiting for it, and returns
// the function that releases it.
func lockWait(path string) (func(), error) {
	f, err := flockFile(path, syscall.LOCK_EX)
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// lockShared opens (creating) path and takes a shared lock on it, waiting
// for an exclusive holder to let go.
func lockShared(path string) (*os.File, error) { return flockFile(path, syscall.LOCK_SH) }

// flockFile opens (creating) path and locks it (flock's how), waiting.
func flockFile(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return f, nil
}

// tryLockExclusive takes an exclusive lock on f if no one holds one.
func tryLockExclusive(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// openNoWait are the flags openRegularFile adds: a FIFO opens without
// waiting for a peer, and a symbolic link is not followed.
const openNoWait = syscall.O_NONBLOCK | syscall.O_NOFOLLOW

// fileOwner returns the uid that owns the file fi describes.
func fileOwner(fi os.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// processGone reports whether no process of this pid space has pid
// (kill(pid, 0) finds none). A process of another user is not gone.
func processGone(pid int) bool {
	return pid > 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
