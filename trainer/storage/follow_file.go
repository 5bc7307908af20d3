package storage

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// fileTail follows a run in a directory: the bytes appended to
// progress.jsonl since the last look, decoded by ScanProgress. A file
// replaced (TruncateAfter renames a shorter one over it) or cut shorter
// is read again from its start, with reset.
type fileTail struct {
	root, run, dir string
	seen           os.FileInfo // the file read last, to tell a replacement
	offset         int64       // bytes of complete lines read
}

func (f *fileTail) next() (recs []Record, reset bool, err error) {
	path := filepath.Join(f.dir, ProgressFile)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		reset = f.seen != nil
		f.seen, f.offset = nil, 0
		return nil, reset, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading progress: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("progress file %s is not a regular file (%v)", path, fi.Mode().Type())
	}
	if f.seen != nil && (!os.SameFile(f.seen, fi) || fi.Size() < f.offset) {
		reset, f.offset = true, 0
	}
	f.seen = fi
	if fi.Size() == f.offset {
		return nil, reset, nil
	}
	file, err := openRegular(path)
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
	used, err := scanProgress(io.NewSectionReader(file, f.offset, opened.Size()-f.offset), path, func(r Record) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("reading progress: %w", err)
	}
	f.offset += used
	return recs, reset, nil
}

// exists judges a checkpoint as a read-only Run does: its directory is
// there.
func (f *fileTail) exists(name string) (bool, error) {
	fi, err := os.Lstat(filepath.Join(f.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking checkpoint %s: %w", name, err)
	}
	return fi.IsDir(), nil
}

func (f *fileTail) failed(attempt string) (Failure, bool, error) {
	return FailedForGood(f.root, f.run, attempt)
}

func (f *fileTail) close() error { return nil }
