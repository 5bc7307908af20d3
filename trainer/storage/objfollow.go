package storage

import (
	"errors"
	"fmt"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// recordsFrom is a reader's incremental read (Follower): it reads the
// progress segments written since its last read and returns the records
// from index from on, and how many there are in all. When the last
// segment read is gone, the writer rolled the history back
// (TruncateAfter, deleting newest first, on a resume): the segments are
// read again from the first and returned whole, with reset. That costs
// a HEAD of the last segment and a List after it per call, and a Get per
// new segment.
func (r *ObjectRun) recordsFrom(from int) (recs []Record, n int, reset bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, 0, false, ErrClosed
	case !r.readOnly:
		return nil, 0, false, errors.New("following a run needs a read-only ObjectRun")
	}
	if r.cursor != "" {
		_, err := r.st.Head(r.ctx, r.cursor)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			reset, from = true, 0
			if err := r.reload(); err != nil {
				return nil, 0, false, err
			}
		case err != nil:
			return nil, 0, false, fmt.Errorf("reading progress: %w", err)
		}
	}
	if !reset {
		if err := r.follow(); err != nil {
			return nil, 0, false, err
		}
	}
	from = min(from, len(r.recs))
	return cloneRecords(r.recs[from:]), len(r.recs), reset, nil
}

// hasManifest reports whether checkpoint name exists: its manifest does.
func (r *ObjectRun) hasManifest(name string) (bool, error) {
	_, err := r.st.Head(r.ctx, r.ckptKey(name, ManifestFile))
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("checking checkpoint %s: %w", name, err)
	}
	return true, nil
}
