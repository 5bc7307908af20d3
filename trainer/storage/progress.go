package storage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// maxRecordLine bounds one line of progress.jsonl: a longer line is
// corrupt, however much of the file follows.
const maxRecordLine = 4 << 20

// progressCheck holds what a reader must remember between lines: the line
// number, the last step and the checkpoints already recorded.
type progressCheck struct {
	path  string
	line  int
	last  int64
	any   bool
	seen  map[string]int
	valid int64 // bytes of complete lines so far
}

func (c *progressCheck) corrupt(err error) error {
	return &CorruptError{Path: c.path, Line: c.line, Err: err}
}

// accept decodes one complete line (without its newline) and checks it
// follows the lines before it.
func (c *progressCheck) accept(line []byte) (Record, error) {
	c.line++
	rec, err := decodeRecord(line)
	if err != nil {
		return Record{}, c.corrupt(err)
	}
	if c.any && rec.Step < c.last {
		return Record{}, c.corrupt(fmt.Errorf("step %d comes after step %d: steps are out of order", rec.Step, c.last))
	}
	if rec.Checkpoint != "" {
		if prev, dup := c.seen[rec.Checkpoint]; dup {
			return Record{}, c.corrupt(fmt.Errorf("checkpoint %s already recorded on line %d", rec.Checkpoint, prev))
		}
		if c.seen == nil {
			c.seen = map[string]int{}
		}
		c.seen[rec.Checkpoint] = c.line
	}
	c.last, c.any = rec.Step, true
	return rec, nil
}

// scanProgress reads progress records from r one line at a time and calls
// fn with each, holding at most one line in memory. Bytes after the last
// newline are a torn line (a writer killed mid-append, or still appending)
// and are left out; the returned count is the length of the complete lines.
// A malformed line, a line longer than maxRecordLine, a step lower than the
// one before or a checkpoint named twice is a *CorruptError naming path
// (may be "") and the line.
func scanProgress(r io.Reader, path string, fn func(Record) error) (valid int64, err error) {
	c := progressCheck{path: path}
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte // a line longer than the buffer, being assembled
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if len(long)+len(chunk) > maxRecordLine {
				c.line++
				return c.valid, c.corrupt(fmt.Errorf("line is longer than %d bytes", maxRecordLine))
			}
			long = append(long, chunk...)
			continue
		case errors.Is(err, io.EOF):
			return c.valid, nil // what is left is torn (or nothing)
		case err != nil:
			return c.valid, fmt.Errorf("reading progress: %w", err)
		}
		line := chunk
		if long != nil {
			line = append(long, chunk...)
			long = nil
		}
		if len(line) > maxRecordLine+1 {
			c.line++
			return c.valid, c.corrupt(fmt.Errorf("line is longer than %d bytes", maxRecordLine))
		}
		rec, err := c.accept(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			return c.valid, err
		}
		c.valid += int64(len(line))
		if err := fn(rec); err != nil {
			return c.valid, err
		}
	}
}

// ScanProgress streams the records of a progress.jsonl stream to fn, one
// line at a time, and returns the length of the complete lines read (a
// follower resumes after them). Errors are as for ReadProgress.
func ScanProgress(r io.Reader, fn func(Record) error) (valid int64, err error) {
	return scanProgress(r, "", fn)
}

// ReadProgress decodes a progress.jsonl stream, one line at a time. A torn
// last line (no terminating newline, as left by a writer killed mid-append
// or still appending) is ignored; any other malformed line, a step lower
// than the one before it, or a checkpoint recorded twice is a
// *CorruptError naming its line number.
func ReadProgress(r io.Reader) ([]Record, error) {
	var recs []Record
	_, err := scanProgress(r, "", func(rec Record) error {
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// ScanProgressFile streams the records of a progress file to fn, as
// ReadProgress decodes them, without holding the file in memory. It
// refuses a symbolic link or anything but a regular file (a device, a
// FIFO). A missing file is an error matching fs.ErrNotExist. Errors name
// the file, and for a corrupt line the line number.
func ScanProgressFile(path string, fn func(Record) error) error {
	f, err := openRegular(path)
	if err != nil {
		return fmt.Errorf("opening progress: %w", err)
	}
	defer f.Close()
	_, err = scanProgress(f, path, fn)
	return err
}

// ReadProgressFile reads every complete record of a progress file (see
// ScanProgressFile).
func ReadProgressFile(path string) ([]Record, error) {
	var recs []Record
	err := ScanProgressFile(path, func(rec Record) error {
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// errNotRegular is wrapped by openRegular's refusals.
var errNotRegular = errors.New("not a regular file")

// openRegular opens path read-only, refusing a symbolic link or anything
// but a regular file.
func openRegular(path string) (*os.File, error) {
	return openRegularFile(path, os.O_RDONLY, 0)
}

// openRegularFile opens path with flag, refusing a symbolic link or
// anything but a regular file: the entry is checked before opening (so a
// FIFO or device is not opened at all) and the file opened is checked to
// be that entry (so one swapped in between is refused too). A regular file
// replaced by another between the check and the open (a note or state
// file rewritten by rename while it is read) is looked at again, up to
// openTries times in all.
func openRegularFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	for try := 1; ; try++ {
		f, err := openRegularOnce(path, flag, perm)
		if !errors.Is(err, errReplaced) || try == openTries {
			return f, err
		}
	}
}

// openTries bounds openRegularFile's looks at an entry that keeps being
// replaced. Each costs microseconds. With three, a reader beside a writer
// renaming in a tight loop (TestNoteReadWhileReplaced, under the race
// detector in CI) lost all three races once, at its 1978th read.
const openTries = 10

// errReplaced is openRegularOnce's answer when a regular file was seen and
// another regular file opened.
var errReplaced = fmt.Errorf("%w (it changed while being opened)", errNotRegular)

func openRegularOnce(path string, flag int, perm fs.FileMode) (*os.File, error) {
	before, err := os.Lstat(path)
	if err != nil {
		before = nil
	}
	switch {
	case err == nil && !before.Mode().IsRegular():
		return nil, fmt.Errorf("%s: %w (%v)", path, errNotRegular, before.Mode().Type())
	case err != nil && !(errors.Is(err, fs.ErrNotExist) && flag&os.O_CREATE != 0):
		return nil, err
	}
	// A FIFO swapped in after the Lstat must not block the open: with
	// O_NONBLOCK it opens at once (and is refused below); a regular file
	// ignores the flag. O_NOFOLLOW refuses a link swapped in.
	f, err := os.OpenFile(path, flag|openNoWait, perm)
	if err != nil {
		return nil, err
	}
	opened, err := f.Stat()
	if err == nil && before == nil {
		before, err = os.Lstat(path) // created just now: still the same entry?
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	switch {
	case !opened.Mode().IsRegular():
		f.Close()
		return nil, fmt.Errorf("%s: %w (it changed while being opened)", path, errNotRegular)
	case !os.SameFile(before, opened):
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, errReplaced)
	}
	return f, nil
}
