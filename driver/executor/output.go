package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// fifoRetry is how often openOutput retries a FIFO that has no reader yet.
const fifoRetry = 20 * time.Millisecond

// openOutput opens a log destination for writing in the plugin process:
// "" is /dev/null, a FIFO waits (until ctx is done) for its reader (Nomad's
// logmon), a missing file is created and a regular file appended to. The
// file is blocking.
//
// The plugin runs as root, and Nomad's log directory (alloc/logs) is the
// task's to write: a task could put a link there, or make the directory
// itself a link, to have root create or append to a file of its choosing.
// So the directory is opened without following a link, the file is
// reached through it, also not through a link, and a regular file must
// be the plugin's own with no other name (no hard link to another file).
func openOutput(ctx context.Context, path string) (*os.File, error) {
	if path == "" || path == os.DevNull {
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	path = filepath.Clean(path)
	dir, name := filepath.Dir(path), filepath.Base(path) // no trailing slash: it would follow a link
	dfd, err := unix.Open(dir, dirOpenFlags, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	err = unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, &fs.PathError{Op: "create", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	case err != nil:
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	case st.Mode&unix.S_IFMT == unix.S_IFREG:
		return openOwnFile(dfd, name, path)
	case st.Mode&unix.S_IFMT != unix.S_IFIFO:
		return nil, fmt.Errorf("log output %s is neither a FIFO nor a regular file", path)
	}
	// A FIFO: a non-blocking open for writing fails with ENXIO until a
	// reader has it open. Retrying keeps the wait cancellable.
	for {
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
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

// openOwnFile opens the regular file name in the directory dfd to append
// to it, when it is the plugin's own and has no other name.
func openOwnFile(dfd int, name, path string) (*os.File, error) {
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	switch {
	case err != nil:
	case st.Mode&unix.S_IFMT != unix.S_IFREG: // swapped since the look
		err = fmt.Errorf("log output %s changed while opened", path)
	case int(st.Uid) != os.Geteuid() || st.Nlink != 1:
		err = fmt.Errorf("log output %s is not the plugin's own file (owner uid %d, %d links)", path, st.Uid, st.Nlink)
	default:
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// OpenNoLinks opens path with flags (O_NOFOLLOW and O_CLOEXEC added)
// through its directory, opened without following a link: for a file the
// plugin, as root, reads in a task's directory, where the task could make
// the file or its directory a link to another's.
func OpenNoLinks(path string, flags int) (*os.File, error) {
	path = filepath.Clean(path)
	dfd, err := unix.Open(filepath.Dir(path), dirOpenFlags, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, filepath.Base(path), flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
