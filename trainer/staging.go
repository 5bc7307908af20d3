package trainer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// useMemoryScratch marks the memory scratch in use for the session, so
// that no sweep removes it (the node's first rank sweeps the ones runs
// left, as it does node caches). It is called once the gang has shared
// the resume point: every rank that clears the scratch has by then.
func (s *Session) useMemoryScratch() {
	if s.scratch == "" {
		return
	}
	mark, err := storage.UseNodeDir(s.scratch)
	if err != nil {
		s.log.Warn("could not mark the memory staging directory in use", "error", err)
		return
	}
	s.releaseNode = append(s.releaseNode, mark.Close)
}

// memoryScratch returns the RAM-backed directory this node's ranks build
// checkpoints in when the policy stages them in memory on an object store
// (CheckpointConfig.Staging), or "" for the default, the run directory's
// scratch. It is <shm>/nomad-train-<uid>/<run>, the same for every rank
// of the node and every attempt, so that the next start clears what a
// killed worker left in memory. The per-user directory must be this
// user's own, private, and not a link: another user of the machine could
// otherwise read or swap the checkpoints.
func (s *Session) memoryScratch(env workerenv.Env) string {
	if env.Checkpoint.Staging != workerenv.StagingMemory || !storage.IsObjectPath(env.StoragePath) {
		return ""
	}
	shm, err := memoryFS()
	if err == nil {
		var dir string
		if dir, err = privateDir(filepath.Join(shm, fmt.Sprintf("nomad-train-%d", os.Getuid()))); err == nil {
			if s.localRank == 0 {
				s.sweepNodeCaches(dir)
			}
			sum := sha256.Sum256([]byte(s.cache))
			return filepath.Join(dir, env.RunName+"-"+hex.EncodeToString(sum[:6]))
		}
	}
	s.log.Warn("checkpoints are staged on disk, not in memory", "error", err)
	return ""
}

// clearScratch removes the checkpoints an earlier attempt half-built under
// local, and those staged in memory, and returns local's scratch
// directory.
func (s *Session) clearScratch(local string) string {
	scratch := filepath.Join(local, scratchDir)
	os.RemoveAll(scratch)
	if s.scratch != "" {
		os.RemoveAll(s.scratch)
	}
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
