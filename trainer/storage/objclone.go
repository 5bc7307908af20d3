package storage

import (
	"fmt"
	"os"
)

// Cloner is what a run's writer offers when it can copy another run's
// checkpoint into its own without bringing the files through this
// machine: an ObjectRun, whose server copies them. (A tuner's PBT exploit
// uses it; for a Run it copies directories itself.)
type Cloner interface {
	// CloneCheckpoint commits, with rec, a copy of the checkpoint name of
	// the run from, kept at the same storage path, and returns the copy's
	// name. What the run recorded after rec.Step is rolled back
	// (TruncateAfter) once the copy is in place, just before it is
	// committed: a clone that fails leaves the run's own history and
	// checkpoints as they were.
	CloneCheckpoint(from, name string, rec Record) (string, error)
}

var _ Cloner = (*ObjectRun)(nil)

// CloneCheckpoint copies checkpoint name of run from into a checkpoint
// of r and commits it with rec, as a commit of r's ranks would be: the
// files kept as objects are copied by the server (objstore.Copy), those
// the manifest carries go up again inside r's manifest, which is written
// last. The source's manifest is vetted against what its prefix holds
// first, as a download's is, and the sums r's manifest gives are the
// source's: whoever restores the copy checks its files against them.
// r's records after rec.Step, and their checkpoints, are rolled back
// only once the copy's objects are all in place. On failure before the
// manifest nothing of the copy is left.
func (r *ObjectRun) CloneCheckpoint(from, name string, rec Record) (string, error) {
	if err := checkRunName(from); err != nil {
		return "", err
	}
	src := objFiles{ctx: r.ctx, st: r.st, run: from}
	m, _, carried, err := src.vetted(name, nil)
	if err != nil {
		return "", fmt.Errorf("cloning %s of run %s: %w", name, from, err)
	}
	dst, err := r.Reserve()
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		_ = r.Abandon(dst)
		return "", fmt.Errorf("cloning %s of run %s: %w", name, from, err)
	}
	inline := InlineFiles{}
	if len(carried) > 0 {
		if inline.Dir, err = os.MkdirTemp(r.LocalDir(), stagingPrefix+"*"); err != nil {
			return fail(err)
		}
		sums, err := copyInline(m, carried, inline.Dir)
		if err == nil {
			// The carried bytes are hashed again for the copy's manifest:
			// they must be the ones the source's vouched for.
			if problems := (Manifest{Files: inlineOf(m)}).Check(sums); len(problems) > 0 {
				err = &CheckpointError{Name: name, Problems: problems}
			}
		}
		if err != nil {
			_ = os.RemoveAll(inline.Dir)
			return fail(err)
		}
		for _, f := range sums {
			inline.Files = append(inline.Files, FileSum{Path: f.Path, Size: f.Size})
		}
	}
	var files []FileSum
	for _, f := range m.Files {
		if f.Inline {
			continue
		}
		if _, err := r.st.Copy(r.ctx, src.prefix(name)+f.Path, r.ckptKey(dst, f.Path)); err != nil {
			_ = os.RemoveAll(inline.Dir)
			return fail(err)
		}
		files = append(files, f)
	}
	if err := r.TruncateAfter(rec.Step); err != nil {
		_ = os.RemoveAll(inline.Dir)
		return fail(fmt.Errorf("rolling back to step %d: %w", rec.Step, err))
	}
	if err := r.CommitFiles(dst, rec, files, inline); err != nil {
		return "", fmt.Errorf("cloning %s of run %s: %w", name, from, err)
	}
	return dst, nil
}

// inlineOf is the files m's object carries.
func inlineOf(m Manifest) []FileSum {
	var in []FileSum
	for _, f := range m.Files {
		if f.Inline {
			in = append(in, f)
		}
	}
	return in
}
