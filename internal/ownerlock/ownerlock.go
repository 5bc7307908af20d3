//go:build unix

package ownerlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// LockFile is the name of the lock file inside an owned directory.
const LockFile = ".owner"

// maxTries bounds how often a new entry is made again after a sweeper took
// it in the moment between its creation and its lock. It is there against
// an endless loop, not to give up early: a sweeper that sweeps over and
// over (TestSweepRacingOwners' does) won that moment 10 times in a row on
// a busy 2-core machine, and every retry is cheap and leaves nothing.
const maxTries = 1000

// errSwept says an entry was removed by a sweeper before its owner locked it.
var errSwept = errors.New("removed before it was locked")

// CreateFile creates a new file in dir, named as os.CreateTemp names one
// after pattern, and holds its lock. The caller owns the file for as long
// as it keeps it open; it removes the file before closing it.
func CreateFile(dir, pattern string) (*os.File, error) {
	for range maxTries {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return nil, err
		}
		if err = hold(f, f.Name()); err == nil {
			return f, nil
		}
		f.Close()
		if !errors.Is(err, errSwept) {
			os.Remove(f.Name())
			return nil, err
		}
	}
	return nil, fmt.Errorf("create owned file in %s: swept %d times in a row", dir, maxTries)
}

// MkdirTemp makes a new directory in dir, named as os.MkdirTemp names one
// after pattern, with a lock file inside whose lock it holds. The caller
// owns the directory for as long as it keeps the returned file open; it
// removes the directory before closing it.
func MkdirTemp(dir, pattern string) (string, *os.File, error) {
	for range maxTries {
		path, err := os.MkdirTemp(dir, pattern)
		if err != nil {
			return "", nil, err
		}
		lockPath := filepath.Join(path, LockFile)
		f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrNotExist) { // the directory was swept already
			continue
		}
		if err != nil {
			os.RemoveAll(path)
			return "", nil, fmt.Errorf("create lock file: %w", err)
		}
		if err = hold(f, lockPath); err == nil {
			return path, f, nil
		}
		f.Close()
		if !errors.Is(err, errSwept) {
			os.RemoveAll(path)
			return "", nil, err
		}
	}
	return "", nil, fmt.Errorf("make owned directory in %s: swept %d times in a row", dir, maxTries)
}

// hold takes f's lock for good and checks that path still names f: a
// sweeper that took the lock first has removed it by the time it lets go.
func hold(f *os.File, path string) error {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return errSwept
		}
		return fmt.Errorf("lock %s: %w", path, err)
	}
	if !same(f, path) {
		return errSwept
	}
	return nil
}

// same reports whether path names the open file f (not a link to it).
func same(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Lstat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// Sweep removes the entries of dir whose names match and whose owner is
// gone: a regular file whose lock can be taken, or a directory whose lock
// file's lock can be taken. An entry with no lock file, a symbolic link or
// one that cannot be opened is left alone, and so is every entry whose
// owner lives. It returns the paths it removed; a dir that does not exist
// holds nothing to sweep.
func Sweep(dir string, match func(name string) bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweep %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !match(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		var gone bool
		switch {
		case e.Type().IsRegular():
			gone, err = sweepFile(path)
		case e.IsDir():
			gone, err = sweepDir(path)
		default:
			continue
		}
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}

// sweepFile removes the file at path if its lock can be taken.
func sweepFile(path string) (bool, error) {
	return withLock(path, func() error { return os.Remove(path) })
}

// sweepDir removes the directory at path if its lock file's lock can be
// taken.
func sweepDir(path string) (bool, error) {
	return withLock(filepath.Join(path, LockFile), func() error { return os.RemoveAll(path) })
}

// withLock runs remove while it holds the lock of the regular file at
// lockPath, if it can take it and lockPath still names the file it locked.
func withLock(lockPath string, remove func() error) (bool, error) {
	fd, err := unix.Open(lockPath, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, nil // not ours, not ours to open, or already gone
	}
	f := os.NewFile(uintptr(fd), lockPath)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, nil
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // its owner lives (or is sweeping it itself)
	}
	if !same(f, lockPath) {
		return false, nil
	}
	if err := remove(); err != nil {
		return false, fmt.Errorf("remove stale %s: %w", lockPath, err)
	}
	return true, nil
}

// PIDNamed matches the names that start with prefix, then a process ID
// (digits), then a dash: the names owners give their entries with
// Pattern, and no others, so that a sweep leaves the rest alone.
func PIDNamed(prefix string) func(name string) bool {
	return func(name string) bool {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			return false
		}
		pid, _, ok := strings.Cut(rest, "-")
		if !ok || pid == "" {
			return false
		}
		for _, c := range pid {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
}

// Pattern is the os.CreateTemp pattern of an entry owned by this process:
// prefix, this process's ID, a dash, the rest.
func Pattern(prefix, rest string) string {
	return fmt.Sprintf("%s%d-%s", prefix, os.Getpid(), rest)
}
