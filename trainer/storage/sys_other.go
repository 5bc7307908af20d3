//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package storage

import (
	"fmt"
	"os"
)

// lockRun opens the lock file without locking it: this platform has no
// flock(2), so a second writer is not detected.
func lockRun(path string) (*os.File, error) { return lockShared(path) }

// lockWait takes no lock on this platform: processes sharing a local
// directory may download the same checkpoint twice, into temporary names.
func lockWait(path string) (func(), error) { return func() {}, nil }

// lockShared opens (creating) path without locking it.
func lockShared(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	return f, nil
}

// tryLockExclusive cannot tell whether another process uses the file on
// this platform, so it says no: node caches are not swept.
func tryLockExclusive(*os.File) bool { return false }

// openNoWait: this platform has neither FIFOs to wait on nor O_NOFOLLOW.
const openNoWait = 0

// fileOwner cannot tell who owns a file on this platform.
func fileOwner(os.FileInfo) (int, bool) { return 0, false }

// processGone cannot tell on this platform: no process is taken for gone.
func processGone(int) bool { return false }
