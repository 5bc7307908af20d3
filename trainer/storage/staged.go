package storage

import (
	"fmt"
	"os"
	"sync"
)

// Staged is a checkpoint being written: a staging directory inside the run
// directory (a local directory for an ObjectRun). Fill Dir (directly or with AddDir), then Run.Commit it or
// Abort it. Its methods are safe for concurrent use.
type Staged struct {
	run any // the *Run or *ObjectRun that staged it
	dir string

	mu   sync.Mutex
	done bool // guarded by mu: committed or aborted
}

// Dir returns the staging directory, where the checkpoint's files go.
func (s *Staged) Dir() string { return s.dir }

// AddDir moves the contents of src into the staging directory, keeping
// sub-directories and merging those that already exist (several ranks may
// contribute files to the same sub-directory). Entries are renamed when
// src is on the same filesystem and copied then removed otherwise. A file
// that is already staged is ErrExists. src is left in place, empty.
func (s *Staged) AddDir(src string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return ErrStagedDone
	}
	if err := moveInto(src, s.dir); err != nil {
		return fmt.Errorf("staging files of %s: %w", src, err)
	}
	return nil
}

// Abort removes the staging directory. Aborting a Staged that was already
// committed or aborted does nothing, so Abort can be deferred.
func (s *Staged) Abort() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	s.done = true
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("removing staging directory: %w", err)
	}
	return nil
}
