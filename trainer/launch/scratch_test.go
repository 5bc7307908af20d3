package launch

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/ownerlock"
)

// A launcher killed with SIGKILL leaves its scratch directory and its
// workers' shared-memory regions behind; the next launch removes them,
// and only them: a live run's directory and region stay, and so does
// anything not named as ours.
func TestLaunchSweepsWhatDeadRunsLeft(t *testing.T) {
	tmp := os.TempDir()
	staleDir, staleLock, err := ownerlock.MkdirTemp(tmp, ownerlock.Pattern(scratchPrefix, "dead-*"))
	must.NoError(t, err)
	must.NoError(t, staleLock.Close()) // its owner is gone
	liveDir, liveLock, err := ownerlock.MkdirTemp(tmp, ownerlock.Pattern(scratchPrefix, "live-*"))
	must.NoError(t, err)
	defer func() { os.RemoveAll(liveDir); liveLock.Close() }()
	foreign, err := os.MkdirTemp(tmp, scratchPrefix+"py-") // another tool's, with no lock
	must.NoError(t, err)
	defer os.RemoveAll(foreign)

	shm := "/dev/shm"
	if fi, err := os.Stat(shm); err != nil || !fi.IsDir() {
		shm = tmp
	}
	staleRegion, err := ownerlock.CreateFile(shm, ownerlock.Pattern("nomad-train-collective-", "*"))
	must.NoError(t, err)
	defer os.Remove(staleRegion.Name())
	must.NoError(t, staleRegion.Close())
	liveRegion, err := ownerlock.CreateFile(shm, ownerlock.Pattern("nomad-train-collective-", "*"))
	must.NoError(t, err)
	defer func() { os.Remove(liveRegion.Name()); liveRegion.Close() }()

	o, out, _ := opts(t, "echo", 1)
	res, err := Launch(context.Background(), o)
	must.NoError(t, err)
	must.False(t, res.Failed(), must.Sprint(out.String()))

	for _, gone := range []string{staleDir, staleRegion.Name()} {
		_, err := os.Lstat(gone)
		must.ErrorIs(t, err, os.ErrNotExist, must.Sprintf("%s is still there", gone))
	}
	for _, kept := range []string{liveDir, filepath.Join(liveDir, ownerlock.LockFile), foreign, liveRegion.Name()} {
		_, err := os.Lstat(kept)
		must.NoError(t, err, must.Sprintf("%s was removed", kept))
	}
}

// The launcher's own scratch directory is named for it and locked while
// it runs, and gone when it returns.
func TestScratchIsOwnedAndRemoved(t *testing.T) {
	dir, lock, err := makeScratch("a run/name")
	must.NoError(t, err)
	must.True(t, ownerlock.PIDNamed(scratchPrefix)(filepath.Base(dir)))
	removed, err := ownerlock.Sweep(filepath.Dir(dir), ownerlock.PIDNamed(scratchPrefix))
	must.NoError(t, err)
	must.SliceEmpty(t, removed)
	must.NoError(t, os.RemoveAll(dir))
	must.NoError(t, lock.Close())
}
