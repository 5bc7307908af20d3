package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/hashicorp/go-hclog"
)

// quarantineSuffix is appended to the directory name of a checkpoint found
// corrupt: the writer moves it aside, never deletes it, so a person can
// look at it. Open leaves such directories alone.
const quarantineSuffix = ".corrupt"

// BadCheckpoint is a checkpoint LatestIntact passed over.
type BadCheckpoint struct {
	// Name is the checkpoint's name.
	Name string
	// Err says what was wrong; it wraps ErrCorruptCheckpoint.
	Err error
	// MovedTo is the directory the writer moved it to, or "" for a
	// read-only Run, which moves nothing.
	MovedTo string
}

// Restore is the checkpoint a run restarts from.
type Restore struct {
	// Name and Path are the checkpoint's name and directory; empty when
	// there is no intact checkpoint (OK is false).
	Name, Path string
	// Record is the record that committed it.
	Record Record
	OK     bool
	// Unverified is set for a checkpoint written before manifests existed,
	// whose files cannot be checked.
	Unverified bool
	// Skipped are the newer checkpoints found corrupt, newest first.
	Skipped []BadCheckpoint
}

// Latest returns the most recent committed checkpoint that exists and is
// intact: its name and directory. ok is false when there is none. See
// LatestIntact for how checkpoints are checked.
func (r *Run) Latest() (name, path string, ok bool, err error) {
	res, err := r.LatestIntact()
	return res.Name, res.Path, res.OK, err
}

// LatestIntact finds the checkpoint to restart from: the most recent one
// whose files match its manifest (sizes and SHA-256) and whose manifest
// matches its record. A corrupt one is passed over with an error logged and
// reported in Skipped; the writer moves it to <name>.corrupt and never
// deletes it. A checkpoint without a manifest was written before manifests
// existed and is used unverified (said once), unless an older one has a
// manifest, which means this one lost its own. Errors reading the files
// (other than a mismatch) are returned: they may pass, and a checkpoint is
// not given up for them. A checkpoint is checked once per Run.
func (r *Run) LatestIntact() (Restore, error) {
	_, live, err := r.snapshot()
	if err != nil {
		return Restore{}, err
	}
	return newestIntact(live, r.log, r.quarantine, func(i int) (string, bool, error) {
		rec := live[i]
		legacy, err := r.check(rec, live[:i])
		if err != nil && !errors.As(err, new(*CheckpointError)) && r.gone(rec.Checkpoint) {
			return "", false, errVanished // retention deleted it while a reader checked it
		}
		if err == nil && legacy {
			r.sayLegacy(rec.Checkpoint)
		}
		return r.CheckpointPath(rec.Checkpoint), legacy, err
	})
}

// errVanished says a checkpoint went away (retention) while it was checked.
var errVanished = errors.New("checkpoint vanished")

// newestIntact walks the live checkpoints from the newest back, the one
// fall-back rule of every store: try checks (and on object storage
// fetches) the i-th and gives its local path; a corrupt one
// (*CheckpointError) is quarantined, logged and skipped, one that
// vanished is skipped, and any other error ends the walk, since it may
// pass and a checkpoint is not given up for it.
func newestIntact(live []Record, log hclog.Logger, quarantine func(string) (string, error),
	try func(i int) (path string, unverified bool, err error)) (Restore, error) {
	var res Restore
	for i := len(live) - 1; i >= 0; i-- {
		rec := live[i]
		path, unverified, err := try(i)
		var bad *CheckpointError
		switch {
		case errors.As(err, &bad):
			b := BadCheckpoint{Name: rec.Checkpoint, Err: err}
			if b.MovedTo, err = quarantine(rec.Checkpoint); err != nil {
				return res, err
			}
			log.Error("checkpoint is corrupt: falling back to an older one", "checkpoint", rec.Checkpoint, "error", bad, "moved_to", b.MovedTo)
			res.Skipped = append(res.Skipped, b)
			continue
		case errors.Is(err, errVanished):
			continue
		case err != nil:
			return res, fmt.Errorf("checking checkpoint %s: %w", rec.Checkpoint, err)
		}
		res.Name, res.Path, res.Record, res.OK, res.Unverified = rec.Checkpoint, path, rec, true, unverified
		return res, nil
	}
	return res, nil
}

// check verifies one checkpoint, once per Run; older are the live
// checkpoints before it.
func (r *Run) check(rec Record, older []Record) (legacy bool, err error) {
	r.mu.Lock()
	done := r.intact[rec.Checkpoint]
	r.mu.Unlock()
	if done {
		return false, nil
	}
	legacy, err = verifyCheckpoint(r.dir, rec.Checkpoint, rec)
	if err != nil {
		return false, err
	}
	if legacy {
		for _, o := range slices.Backward(older) {
			if _, err := os.Lstat(filepath.Join(r.dir, o.Checkpoint, ManifestFile)); err == nil {
				return false, &CheckpointError{Name: rec.Checkpoint,
					Problems: []string{fmt.Sprintf("%s is missing (the older %s has one)", ManifestFile, o.Checkpoint)}}
			}
		}
		return true, nil
	}
	r.mu.Lock()
	r.intact[rec.Checkpoint] = true
	r.mu.Unlock()
	return false, nil
}

// quarantine moves a corrupt checkpoint aside (writer only) and returns
// where to.
func (r *Run) quarantine(name string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readOnly {
		return "", nil
	}
	if err := r.writable(); err != nil {
		return "", err
	}
	to := name + quarantineSuffix
	if err := os.Rename(filepath.Join(r.dir, name), filepath.Join(r.dir, to)); err != nil {
		return "", fmt.Errorf("moving corrupt checkpoint aside: %w", err)
	}
	delete(r.live, name)
	if err := syncDir(r.dir); err != nil {
		return "", err
	}
	return filepath.Join(r.dir, to), nil
}

// gone reports whether a checkpoint's directory no longer exists.
func (r *Run) gone(name string) bool {
	_, err := os.Lstat(r.CheckpointPath(name))
	return errors.Is(err, fs.ErrNotExist)
}

// sayLegacy logs, once per Run, that a checkpoint is used unverified.
func (r *Run) sayLegacy(name string) {
	r.mu.Lock()
	said := r.legacy
	r.legacy = true
	r.mu.Unlock()
	if !said {
		r.log.Warn("checkpoint has no manifest (written by an earlier version): restoring it unverified", "checkpoint", name)
	}
}
