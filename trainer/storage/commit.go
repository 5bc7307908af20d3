package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Stage starts a checkpoint: a new staging directory inside the run
// directory, invisible to readers until Commit.
func (r *Run) Stage() (*Staged, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.writable(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(r.dir, stagingPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("creating staging directory: %w", err)
	}
	return &Staged{run: r, dir: dir}, nil
}

// Commit makes a staged checkpoint durable and visible, then applies
// retention. It hashes and flushes every staged file and directory, writes
// and flushes the checkpoint's manifest (ManifestFile), renames the
// staging directory to checkpoint_NNNNNN, flushes the run directory and
// appends rec naming the checkpoint. It returns the checkpoint's name.
// rec.Checkpoint must be empty, and rec.Step no lower than the last
// record's.
//
// Any failure leaves the previous checkpoint latest. Before the rename the
// Staged stays usable (Commit again or Abort); after it, the renamed
// directory is removed. A crash after the rename and before the record
// leaves a complete checkpoint with its manifest, whose record Open
// rebuilds. A failure to delete old checkpoints is logged, not returned:
// the commit stands, and Open finishes the deletion.
func (r *Run) Commit(s *Staged, rec Record) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := r.checkCommit(s, rec)
	if err != nil {
		return "", err
	}
	// Hash and flush without holding mu: a large checkpoint does not hold
	// up Append.
	if err := sealStaged(s.dir, rec); err != nil {
		return "", fmt.Errorf("flushing staged checkpoint: %w", err)
	}
	r.callHook(pointSynced)
	name, trashed, err := r.commitFlushed(s, rec)
	// Retention renamed the dropped checkpoints away under mu; the slow
	// removal runs without it.
	for _, p := range trashed {
		if err := r.empty(p); err != nil {
			r.log.Warn("retention could not delete checkpoint", "error", err)
		}
	}
	return name, err
}

// checkCommit rejects a commit that cannot proceed, and returns rec as it
// will be recorded (with its time). s.mu is held.
func (r *Run) checkCommit(s *Staged, rec Record) (Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.writable(); err != nil {
		return rec, err
	}
	switch {
	case s.run != r:
		return rec, fmt.Errorf("committing a checkpoint staged by another run")
	case s.done:
		return rec, ErrStagedDone
	case rec.Checkpoint != "":
		return rec, fmt.Errorf("%w: checkpoint name %q is chosen by Commit", ErrInvalidRecord, rec.Checkpoint)
	}
	if err := r.checkStep(rec.Step); err != nil {
		return rec, err
	}
	if rec.Time.IsZero() {
		rec.Time = r.now()
	}
	rec, _, err := normalize(rec)
	return rec, err
}

// checkStep refuses a record whose step is lower than the last one's:
// readers refuse such a file. mu is held.
func (r *Run) checkStep(step int64) error {
	if n := len(r.recs); n > 0 && step < r.recs[n-1].Step {
		return fmt.Errorf("%w: step %d is lower than step %d, the last recorded", ErrInvalidRecord, step, r.recs[n-1].Step)
	}
	return nil
}

// commitFlushed renames a flushed staging directory into place, records it
// and moves the checkpoints retention drops to trash, returning their trash
// paths. s.mu is held.
func (r *Run) commitFlushed(s *Staged, rec Record) (name string, trashed []string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.writable(); err != nil {
		return "", nil, err
	}
	if err := r.checkStep(rec.Step); err != nil {
		return "", nil, err
	}
	name = checkpointName(r.next)
	rec.Checkpoint = name
	rec, line, err := normalize(rec)
	if err != nil {
		return "", nil, err
	}
	final := filepath.Join(r.dir, name)
	switch _, err := os.Lstat(final); {
	case err == nil:
		r.next++ // something else took the name; the next commit skips it
		return "", nil, fmt.Errorf("checkpoint directory %s appeared outside this writer", name)
	case !errors.Is(err, fs.ErrNotExist):
		return "", nil, fmt.Errorf("checking checkpoint directory: %w", err)
	}
	if err := os.Rename(s.dir, final); err != nil {
		return "", nil, fmt.Errorf("renaming staged checkpoint: %w", err)
	}
	r.next++
	s.done = true
	if err := syncDir(r.dir); err != nil {
		return "", nil, r.uncommit(name, err)
	}
	r.callHook(pointRenamed)
	if err := r.appendLine(rec, line, true); err != nil {
		return "", nil, r.uncommit(name, err)
	}
	r.live[name] = true
	r.intact[name] = true // hashed from the files just flushed
	r.callHook(pointRecorded)
	for _, drop := range Prune(r.liveRecords(), r.policy) {
		p, err := r.trash(drop)
		if err != nil {
			r.log.Warn("retention could not delete checkpoint", "checkpoint", drop, "error", err)
			continue
		}
		delete(r.live, drop)
		trashed = append(trashed, p)
	}
	return name, trashed, nil
}

// uncommit takes back a renamed checkpoint whose record could not be
// written: Commit reports the failure, so the caller does not count on it.
// It is this writer's own, just made; no other checkpoint is ever deleted
// for want of a record (were this one left, Open would rebuild its record
// from its manifest).
func (r *Run) uncommit(name string, cause error) error {
	if err := r.discard(name); err != nil {
		r.broken = err
		return fmt.Errorf("committing %s: %w (and removing it: %w)", name, cause, err)
	}
	return fmt.Errorf("committing %s: %w", name, cause)
}
