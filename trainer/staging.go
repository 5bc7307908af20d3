package trainer

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// memoryCache returns the per-user RAM-backed directory a node keeps a
// run's checkpoint cache in when the policy stages checkpoints in memory
// on an object store (CheckpointConfig.Staging): <shm>/nomad-train-<uid>.
// It returns "" for the default (the cache on disk), and, with a warning,
// where no RAM-backed directory of this user's own can be had. The
// directory must be this user's own, private, and not a link: another
// user of the machine could otherwise read or swap the checkpoints.
func (s *Session) memoryCache(env workerenv.Env) string {
	if env.Checkpoint.Staging != workerenv.StagingMemory || !storage.IsObjectPath(env.StoragePath) {
		return ""
	}
	shm, err := memoryFS()
	if err == nil {
		var dir string
		if dir, err = privateDir(filepath.Join(shm, fmt.Sprintf("nomad-train-%d", os.Getuid()))); err == nil {
			return dir
		}
	}
	s.log.Warn("checkpoints are staged on disk, not in memory", "error", err)
	return ""
}

// clearScratch removes the checkpoints an earlier attempt half-built under
// local, and returns local's scratch directory.
func (s *Session) clearScratch(local string) string {
	scratch := filepath.Join(local, scratchDir)
	os.RemoveAll(scratch)
	return scratch
}

// privateDir makes dir (mode 0700) or checks that the existing one is a
// directory, not a link, owned by this user and closed to others.
func privateDir(dir string) (string, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("making %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	switch {
	case !fi.IsDir():
		return "", fmt.Errorf("%s is not a directory", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("%s is open to other users (mode %v)", dir, fi.Mode().Perm())
	case !ownedByMe(fi):
		return "", fmt.Errorf("%s belongs to another user", dir)
	}
	return dir, nil
}
