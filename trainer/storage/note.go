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

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// Notes are small records a launcher keeps beside a run, such as the
// config and worker count of its last launch: each one whole file (or
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
	if IsObjectPath(root) {
		st, err := noteStore(ctx, root, run, opts)
		if err != nil {
			return fmt.Errorf("write note %s: %w", name, err)
		}
		if _, err := st.Put(ctx, run+"/"+name, bytes.NewReader(b)); err != nil {
			return fmt.Errorf("write note %s: %w", name, err)
		}
		return nil
	}
	dir, err := runDir(root, run)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write note %s: %w", name, err)
	}
	if err := writeFileAtomic(dir, name, b); err != nil {
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
	if IsObjectPath(root) {
		st, err := noteStore(ctx, root, run, opts)
		if err != nil {
			return nil, fmt.Errorf("read note %s: %w", name, err)
		}
		rc, _, err := st.Get(ctx, run+"/"+name)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, fmt.Errorf("read note %s: %w", name, fs.ErrNotExist)
		}
		if err != nil {
			return nil, fmt.Errorf("read note %s: %w", name, err)
		}
		defer rc.Close()
		return readNoteBody(rc, name)
	}
	dir, err := runDir(root, run)
	if err != nil {
		return nil, err
	}
	f, err := openRegular(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("read note %s: %w", name, err)
	}
	defer f.Close()
	return readNoteBody(f, name)
}

func readNoteBody(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxNoteSize+1))
	if err != nil {
		return nil, fmt.Errorf("read note %s: %w", name, err)
	}
	if len(b) > maxNoteSize {
		return nil, fmt.Errorf("read note %s: longer than %d bytes", name, maxNoteSize)
	}
	return b, nil
}

func noteStore(ctx context.Context, root, run string, opts []Option) (*objstore.Store, error) {
	if err := checkRunName(run); err != nil {
		return nil, err
	}
	return objstore.Open(ctx, root, objectConfig(opts))
}
