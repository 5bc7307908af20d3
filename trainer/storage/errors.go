package storage

import (
	"errors"
	"fmt"
)

// Sentinel errors callers test with errors.Is.
var (
	// ErrUnsupportedScheme is returned by Open for a storage path with a URI
	// scheme other than file:// (for example s3:// or gs://).
	ErrUnsupportedScheme = errors.New("unsupported storage scheme")
	// ErrLocked is returned by Open when another process holds the run's
	// writer lock.
	ErrLocked = errors.New("run is locked by another writer")
	// ErrReadOnly is returned by the mutating methods of a Run opened with
	// OpenReadOnly.
	ErrReadOnly = errors.New("run is open read-only")
	// ErrClosed is returned by the methods of a closed Run.
	ErrClosed = errors.New("run is closed")
	// ErrStagedDone is returned when a Staged checkpoint is used after it was
	// committed or aborted.
	ErrStagedDone = errors.New("staged checkpoint already committed or aborted")
	// ErrInvalidRecord is returned when a record cannot be written (a NaN
	// or infinite metric, a checkpoint name set by the caller).
	ErrInvalidRecord = errors.New("invalid record")
	// ErrExists is returned by Staged.AddDir when a file it would move is
	// already in the staging directory.
	ErrExists = errors.New("file already staged")
	// ErrNoCheckpoint is returned by DownloadCheckpoint when its location
	// holds no committed checkpoint.
	ErrNoCheckpoint = errors.New("no checkpoint")
	// ErrNotCheckpointLocation is returned for an s3:// location that does
	// not name a checkpoint (SplitCheckpointLocation).
	ErrNotCheckpointLocation = errors.New("not a checkpoint's location")
)

// CorruptError reports a line of progress.jsonl that is not a valid record
// and is not a torn last line, or that does not follow the lines before it
// (a step going back, a checkpoint recorded twice). Line counts from 1;
// Path is the file, when known.
type CorruptError struct {
	Path string
	Line int
	Err  error
}

// Error implements error.
func (e *CorruptError) Error() string {
	if e.Path != "" {
		return fmt.Sprintf("%s:%d: progress line %d is corrupt: %v", e.Path, e.Line, e.Line, e.Err)
	}
	return fmt.Sprintf("progress line %d is corrupt: %v", e.Line, e.Err)
}

// Unwrap returns the reason the line was rejected.
func (e *CorruptError) Unwrap() error { return e.Err }
