package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// Notes are small records kept beside a run, such as the config and
// worker count of its last launch from the CLI, or the checkpoint it
// started from (which its rank 0 notes): each one whole file (or
// object), written at once and read whole, wherever the run is kept.
// They are not the run's history (records and checkpoints are); a lost
// note costs a hint to the user, no training.

// maxNoteSize bounds a note read back.
const maxNoteSize = 1 << 20

// noteName keeps note names plain file names that no record of a run
// uses (checkpoints, progress, manifests, the failure mark).
var noteName = regexp.MustCompile(`^last-[a-z0-9-]+\.json$`)

func checkNote(name string) error {
	if !noteName.MatchString(name) {
		return fmt.Errorf("note name %q: want last-<name>.json", name)
	}
	return nil
}

// WriteNote stores b as the note name of the run under root: in the run's
// directory (a temporary file renamed over it), or as one object. Of opts
// only WithObjectConfig counts, for an s3:// root.
func WriteNote(ctx context.Context, root, run, name string, b []byte, opts ...Option) error {
	if err := checkNote(name); err != nil {
		return err
	}
	place, err := notePlace(root, run)
	if err == nil {
		err = writeWhole(ctx, place, name, b, opts)
	}
	if err != nil {
		return fmt.Errorf("write note %s: %w", name, err)
	}
	return nil
}

// ReadNote returns the note name of the run under root; an error wrapping
// fs.ErrNotExist when there is none.
func ReadNote(ctx context.Context, root, run, name string, opts ...Option) ([]byte, error) {
	if err := checkNote(name); err != nil {
		return nil, err
	}
	place, err := notePlace(root, run)
	if err != nil {
		return nil, fmt.Errorf("read note %s: %w", name, err)
	}
	b, _, err := readWhole(ctx, place, name, maxNoteSize, opts)
	if err != nil {
		return nil, fmt.Errorf("read note %s: %w", name, err)
	}
	return b, nil
}

// notePlace is where the run's notes are: its directory, or its location
// on the object store.
func notePlace(root, run string) (string, error) {
	if err := checkRunName(run); err != nil {
		return "", err
	}
	if IsObjectPath(root) {
		return RunLocation(root, run), nil
	}
	return runDir(root, run)
}

// writeWhole writes b as the file name of place (a directory, made if
// need be, or an s3:// location), whole: a reader sees all of b or what
// was there before. Of opts only WithObjectConfig counts.
func writeWhole(ctx context.Context, place, name string, b []byte, opts []Option) error {
	if IsObjectPath(place) {
		st, err := objstore.Open(ctx, place, objectConfig(opts))
		if err != nil {
			return err
		}
		_, err = st.Put(ctx, name, bytes.NewReader(b))
		return err
	}
	dir, err := localRoot(place)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeFileAtomic(dir, name, b)
}

// readWhole reads the file name of place, of at most limit bytes, and
// says when it was written; an error wrapping fs.ErrNotExist when there
// is none. A local file must be a regular file (not a link). Of opts only
// WithObjectConfig counts.
func readWhole(ctx context.Context, place, name string, limit int64, opts []Option) ([]byte, time.Time, error) {
	var r io.Reader
	var written time.Time
	if IsObjectPath(place) {
		st, err := objstore.Open(ctx, place, objectConfig(opts))
		if err != nil {
			return nil, time.Time{}, err
		}
		rc, info, err := st.Get(ctx, name)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, time.Time{}, fmt.Errorf("%s/%s: %w", place, name, fs.ErrNotExist)
		}
		if err != nil {
			return nil, time.Time{}, err
		}
		defer rc.Close()
		r, written = rc, info.LastModified
	} else {
		dir, err := localRoot(place)
		if err != nil {
			return nil, time.Time{}, err
		}
		f, err := openRegular(filepath.Join(dir, name))
		if err != nil {
			return nil, time.Time{}, err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return nil, time.Time{}, err
		}
		r, written = f, fi.ModTime()
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, time.Time{}, err
	}
	if int64(len(b)) > limit {
		return nil, time.Time{}, fmt.Errorf("longer than %d bytes", limit)
	}
	return b, written, nil
}
