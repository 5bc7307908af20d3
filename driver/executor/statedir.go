package executor

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The state dir holds what the root shim runs (spec.json) and how the
// worker ended (exit.json). The driver keeps it in the task's private
// directory, which Nomad gives the task's user: a task could rename the
// state dir away and put a directory of its own in its place, with a
// spec.json of its choosing for the shim to run as root, or an exit.json
// that lies. So no file in it is reached by path. The plugin creates it
// (mode 0700, its own), opens it without following a link, checks its
// owner and mode, and works through that descriptor; the shim inherits
// the descriptor, not the path; and a later open (Recover, Destroy) must
// find the same directory: the device and inode kept in State.

// errNotOurStateDir is wrapped when the state dir's path leads somewhere
// the plugin did not make: a task replaced it.
var errNotOurStateDir = errors.New("the state dir is not the one the plugin made")

// dirOpenFlags open a directory that must not be a symbolic link.
const dirOpenFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// stateDirParent splits path into its parent, with no trailing slash (a
// trailing slash would have the kernel follow a link that O_NOFOLLOW
// should refuse), and its last element.
func stateDirParent(path string) (parent, leaf string) {
	path = filepath.Clean(path)
	return filepath.Dir(path), filepath.Base(path)
}

// createStateDir makes the state dir at path (its parent too, if need
// be), or takes the one a previous start of the task left, and returns it
// open, with its device and inode.
func createStateDir(path string) (dir *os.File, dev, ino uint64, err error) {
	parent, leaf := stateDirParent(path)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, 0, 0, fmt.Errorf("create state dir: %w", err)
	}
	pfd, err := openParent(parent)
	if err != nil {
		return nil, 0, 0, err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, leaf, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, 0, 0, fmt.Errorf("create state dir: %w", err)
	}
	return openStateDirAt(pfd, path, 0, 0)
}

// openStateDir opens the state dir at path, which must be the directory
// of device dev and inode ino (when ino is not 0, as in states recorded
// before these were kept).
func openStateDir(path string, dev, ino uint64) (*os.File, error) {
	parent, _ := stateDirParent(path)
	pfd, err := openParent(parent)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	dir, _, _, err := openStateDirAt(pfd, path, dev, ino)
	return dir, err
}

// openParent opens the state dir's parent, which must not be a link.
func openParent(parent string) (int, error) {
	fd, err := unix.Open(parent, dirOpenFlags, 0)
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return -1, fmt.Errorf("%w: its parent %s is a link or not a directory", errNotOurStateDir, parent)
	case err != nil:
		return -1, &os.PathError{Op: "open", Path: parent, Err: err}
	}
	return fd, nil
}

// openStateDirAt opens path's last element in the directory pfd and
// checks it: a directory, the plugin's own, closed to others, and when
// ino is not 0 the one of device dev and inode ino.
func openStateDirAt(pfd int, path string, dev, ino uint64) (*os.File, uint64, uint64, error) {
	fd, err := unix.Openat(pfd, filepath.Base(path), dirOpenFlags, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, 0, 0, fmt.Errorf("%w: %s is not a directory", errNotOurStateDir, path)
		}
		return nil, 0, 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, 0, fmt.Errorf("stat state dir: %w", err)
	}
	switch {
	case int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0:
		err = fmt.Errorf("%w: %s is owned by uid %d with mode %o", errNotOurStateDir, path, st.Uid, st.Mode&0o7777)
	case ino != 0 && (uint64(st.Dev) != dev || st.Ino != ino):
		err = fmt.Errorf("%w: %s was replaced", errNotOurStateDir, path)
	}
	if err != nil {
		unix.Close(fd)
		return nil, 0, 0, err
	}
	return os.NewFile(uintptr(fd), path), uint64(st.Dev), st.Ino, nil
}

// removeStateDir removes the state dir at path, the directory of device
// dev and inode ino, and what it holds: the files the executor wrote. A
// path that leads elsewhere is left alone, with an error.
func removeStateDir(path string, dev, ino uint64) error {
	dir, err := openStateDir(path, dev, ino)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list state dir: %w", err)
	}
	dfd := int(dir.Fd())
	for _, n := range names {
		if err := unix.Unlinkat(dfd, n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove %s from the state dir: %w", n, err)
		}
	}
	// By name in the parent, the one step not through a descriptor: what
	// a task could put there since the check is its own, and an rmdir
	// takes only an empty directory.
	parent, _ := stateDirParent(path)
	pfd, err := openParent(parent)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Unlinkat(pfd, filepath.Base(path), unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove state dir: %w", err)
	}
	return nil
}

// writeFileAt writes data to the file name in dir through a temporary
// file: write, fsync, rename, fsync the directory. Readers see either the
// old file or the whole new one.
func writeFileAt(dir *os.File, name string, data []byte) error {
	var r [6]byte
	_, _ = rand.Read(r[:])
	tmp := "." + name + ".tmp" + hex.EncodeToString(r[:])
	dfd := int(dir.Fd())
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write temporary file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync temporary file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close temporary file: %w", err)
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	ok = true
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("fsync directory: %w", err)
	}
	return nil
}

// writeJSONAt marshals v and writes it with writeFileAt.
func writeJSONAt(dir *os.File, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	return writeFileAt(dir, name, b)
}

// readBoundedAt reads at most limit bytes of the file name in dir, a
// regular file (not a link; opened without blocking, so a FIFO in its
// place cannot hang the reader).
func readBoundedAt(dir *os.File, name string, limit int64) ([]byte, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a link", errStateFile, name)
		}
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return readBoundedFile(f, limit)
}

// unlinkAt removes the file name from dir; a missing one is no error.
func unlinkAt(dir *os.File, name string) error {
	if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: name, Err: err}
	}
	return nil
}
