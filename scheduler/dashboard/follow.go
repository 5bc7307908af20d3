package dashboard

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// follower reads a progress file as it grows: each next call returns the
// records appended since the one before, decoded by storage.ScanProgress.
// A file replaced (a resumed run rewrites its history) or cut shorter is
// read again from the start, with reset set. Not safe for concurrent use.
type follower struct {
	path   string
	seen   os.FileInfo // the file read last, to tell a replacement
	offset int64       // bytes of complete lines read
}

func newFollower(path string) *follower { return &follower{path: path} }

// next returns the records appended since the last call. reset means the
// caller must drop what it had: recs are then the whole file.
func (f *follower) next() (recs []storage.Record, reset bool, err error) {
	fi, err := os.Lstat(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		reset = f.seen != nil
		f.seen, f.offset = nil, 0
		return nil, reset, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading progress: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("progress file %s is not a regular file (%v)", f.path, fi.Mode().Type())
	}
	if f.seen != nil && (!os.SameFile(f.seen, fi) || fi.Size() < f.offset) {
		reset, f.offset = true, 0
	}
	f.seen = fi
	if fi.Size() == f.offset {
		return nil, reset, nil
	}
	file, err := os.Open(f.path)
	if err != nil {
		return nil, false, fmt.Errorf("reading progress: %w", err)
	}
	defer file.Close()
	opened, err := file.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("reading progress: %w", err)
	}
	if !os.SameFile(opened, fi) {
		return nil, reset, nil // replaced between the two looks: the next call starts over
	}
	used, err := storage.ScanProgress(io.NewSectionReader(file, f.offset, opened.Size()-f.offset), func(r storage.Record) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", f.path, err)
	}
	f.offset += used
	return recs, reset, nil
}
