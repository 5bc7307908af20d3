package storage

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// recoverProgress opens progress.jsonl, cuts a torn last line and loads the
// records. It refuses a progress file that is a symbolic link or not a
// regular file, and streams it rather than reading it whole.
func (r *Run) recoverProgress() error {
	path := filepath.Join(r.dir, ProgressFile)
	_, statErr := os.Lstat(path)
	f, err := openRegularFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening progress: %w", err)
	}
	r.progress = f
	if errors.Is(statErr, fs.ErrNotExist) {
		if err := syncDir(r.dir); err != nil {
			return err
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("reading progress: %w", err)
	}
	var recs []Record
	valid, err := scanProgress(f, path, func(rec Record) error {
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		return fmt.Errorf("loading progress: %w", err)
	}
	if torn := fi.Size() - valid; torn > 0 {
		if err := f.Truncate(valid); err != nil {
			return fmt.Errorf("cutting torn progress line: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("syncing progress: %w", err)
		}
		r.recovery.TornBytes = int(torn)
		r.log.Warn("cut torn last line of progress", "bytes", torn, "records", len(recs))
	}
	r.recs, r.size = recs, valid
	return nil
}

// recoverDir removes scratch entries, finds the live checkpoints and the
// next index, and gives every checkpoint directory that no record names
// its record back from its manifest. A checkpoint is never deleted for
// want of a record: one that cannot be given one (no manifest, as written
// before manifests existed, or an unreadable one) stops Open with an error
// naming it.
func (r *Run) recoverDir() error {
	recorded := map[string]bool{}
	for _, rec := range r.recs {
		if rec.Checkpoint != "" {
			recorded[rec.Checkpoint] = true
			idx, _ := checkpointIndex(rec.Checkpoint)
			r.next = max(r.next, idx+1)
		}
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return fmt.Errorf("listing run directory: %w", err)
	}
	var rebuilt []Record
	for _, e := range entries {
		name := e.Name()
		idx, isCkpt := checkpointIndex(name)
		if q, ok := strings.CutSuffix(name, quarantineSuffix); ok {
			if qi, ok := checkpointIndex(q); ok {
				r.next = max(r.next, qi+1) // a corrupt checkpoint keeps its index
			}
		}
		switch {
		case strings.HasPrefix(name, stagingPrefix) || strings.HasPrefix(name, trashPrefix) || strings.HasPrefix(name, tempPrefix):
			if err := os.RemoveAll(filepath.Join(r.dir, name)); err != nil {
				return fmt.Errorf("removing scratch entry: %w", err)
			}
			r.recovery.Removed = append(r.recovery.Removed, name)
		case isCkpt && recorded[name] && e.IsDir():
			r.live[name] = true
		case isCkpt && !recorded[name]:
			r.next = max(r.next, idx+1)
			rec, err := r.recordFromManifest(name, e)
			if err != nil {
				return err
			}
			rebuilt = append(rebuilt, rec)
		}
	}
	if len(rebuilt) == 0 {
		return nil
	}
	return r.addRebuilt(rebuilt)
}

// recordFromManifest rebuilds the record of an unrecorded checkpoint.
func (r *Run) recordFromManifest(name string, e fs.DirEntry) (Record, error) {
	dir := filepath.Join(r.dir, name)
	if !e.IsDir() {
		return Record{}, fmt.Errorf("%s has no record in %s and is not a directory: move it out of the run directory", dir, ProgressFile)
	}
	m, ok, err := ReadManifest(dir)
	switch {
	case !ok:
		return Record{}, fmt.Errorf("checkpoint %s has no record in %s and no %s to rebuild one from (it may be the debris of a crash during a commit before manifests existed): "+
			"move it out of the run directory, or restore %s", dir, ProgressFile, ManifestFile, ProgressFile)
	case err != nil:
		return Record{}, fmt.Errorf("checkpoint %s has no record in %s and its %s is unreadable: %w", dir, ProgressFile, ManifestFile, err)
	}
	rec := m.Record
	rec.Checkpoint = name
	return rec, nil
}

// addRebuilt merges records rebuilt from manifests into the history, in
// step order (a rebuilt record after the recorded ones of the same step),
// and replaces progress.jsonl with the result.
func (r *Run) addRebuilt(rebuilt []Record) error {
	slices.SortFunc(rebuilt, func(a, b Record) int {
		if a.Step != b.Step {
			return cmp.Compare(a.Step, b.Step)
		}
		return strings.Compare(a.Checkpoint, b.Checkpoint)
	})
	merged := make([]Record, 0, len(r.recs)+len(rebuilt))
	rest := r.recs
	var names []string
	for _, rec := range rebuilt {
		for len(rest) > 0 && rest[0].Step <= rec.Step {
			merged, rest = append(merged, rest[0]), rest[1:]
		}
		merged = append(merged, rec)
		r.live[rec.Checkpoint] = true
		names = append(names, rec.Checkpoint)
	}
	merged = append(merged, rest...)
	if err := r.rewriteProgress(merged); err != nil {
		return fmt.Errorf("rebuilding records of %v: %w", names, err)
	}
	r.recovery.Rebuilt = names
	r.log.Warn("rebuilt the records of checkpoints from their manifests", "dir", r.dir, "checkpoints", names)
	return nil
}
