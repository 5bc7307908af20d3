package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// Crash points of an ObjectRun commit, in order (see pointSynced and the
// others for a Run).
const (
	pointFileUploaded = "file-uploaded" // one file uploaded, others may be in flight
	pointUploaded     = "uploaded"      // files uploaded, no manifest
	pointManifested   = "manifested"    // manifest written, no record
	pointUnmanifestd  = "unmanifested"  // retention deleted a manifest, not its files
)

// filesParallel bounds the files of one checkpoint uploaded or
// downloaded at once (each big file also goes in parallel parts or
// ranges).
const filesParallel = 4

// Stage starts a checkpoint in a local staging directory.
func (r *ObjectRun) Stage() (*Staged, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.writable(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(r.local, stagingPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("creating staging directory: %w", err)
	}
	return &Staged{run: r, dir: dir}, nil
}

// Commit uploads a staged checkpoint, then writes its manifest (sizes and
// SHA-256 of every file, computed while uploading) last, with a
// conditional write, carrying the small files (planInline), then its
// record, then applies retention. The checkpoint exists from the instant
// its manifest does. A failure before
// the manifest leaves the Staged usable and the uploaded objects to be
// removed (now, or by the next OpenObject).
func (r *ObjectRun) Commit(s *Staged, rec Record) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, rec, err := r.reserve(s, rec)
	if err != nil {
		return "", err
	}
	// The lease is checked while the files and the manifest go up: its
	// answer must come before the manifest's last byte, which waits.
	leased := r.checkLease()
	listed, err := listCheckpointFiles(s.dir)
	if err != nil {
		return "", err
	}
	small, big := planInline(listed)
	files, err := r.files.uploadFiles(s.dir, name, big, func() { r.callHook(pointFileUploaded) })
	if err != nil {
		r.deleteObjects(name)
		return "", err
	}
	files, carried, err := r.carry(files, InlineFiles{Dir: s.dir, Files: small})
	defer func() { r.inlineBuf.give(carried.data) }() // the whole object, once encoded
	if err != nil {
		r.deleteObjects(name)
		return "", err
	}
	r.callHook(pointUploaded)
	local, err := r.writeManifest(name, rec, files, &carried, leased, true)
	defer local.discard()
	if err != nil {
		return "", err
	}
	s.done = true
	// The committed files stay in the local directory under the
	// checkpoint's name, with the manifest that marks the copy whole:
	// GetCheckpoint's path, and the restore cache.
	r.keepLocal(s.dir, name, local)
	r.callHook(pointManifested)
	if err := r.record(name, rec); err != nil {
		return "", err
	}
	return name, nil
}

// reserve checks a commit and takes the next checkpoint name.
func (r *ObjectRun) reserve(s *Staged, rec Record) (string, Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.writable(); err != nil {
		return "", rec, err
	}
	switch {
	case s.run != r:
		return "", rec, fmt.Errorf("committing a checkpoint staged by another run")
	case s.done:
		return "", rec, ErrStagedDone
	case rec.Checkpoint != "":
		return "", rec, fmt.Errorf("%w: checkpoint name %q is chosen by Commit", ErrInvalidRecord, rec.Checkpoint)
	}
	rec, err := r.prepare(rec)
	if err != nil {
		return "", rec, err
	}
	name := checkpointName(r.next)
	r.next++
	return name, rec, nil
}

// localManifest is the manifest of a checkpoint's local copy, written to
// a temporary file in the writer's local directory while the manifest
// object goes up (creating a file is a fifth of a millisecond here), and
// renamed into the copy once the checkpoint is committed and the copy
// whole. The zero value holds none.
type localManifest struct {
	written func() (string, error) // waits for the file
}

func (r *ObjectRun) writeLocalManifest(doc []byte) localManifest {
	type result struct {
		path string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		f, err := os.CreateTemp(r.local, tempPrefix+"manifest-*")
		if err != nil {
			done <- result{err: err}
			return
		}
		_, err = f.Write(doc)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(f.Name(), 0o644)
		}
		if err != nil {
			os.Remove(f.Name())
		}
		done <- result{f.Name(), err}
	}()
	return localManifest{sync.OnceValues(func() (string, error) { r := <-done; return r.path, r.err })}
}

// place renames the manifest into the copy at dir, which it marks whole.
func (l localManifest) place(dir string) error {
	if l.written == nil {
		return errors.New("no manifest written")
	}
	p, err := l.written()
	if err != nil {
		return err
	}
	return os.Rename(p, filepath.Join(dir, ManifestFile))
}

// discard removes the manifest's file if it was not placed.
func (l localManifest) discard() {
	if l.written == nil {
		return
	}
	if p, err := l.written(); err == nil {
		os.Remove(p)
	}
}

// keepLocal places a committed checkpoint's staged files at <local>/<name>
// with their manifest; a copy that cannot be placed is dropped (a restore
// downloads it again).
func (r *ObjectRun) keepLocal(staged, name string, local localManifest) {
	dir := filepath.Join(r.local, name)
	os.RemoveAll(dir)
	if err := local.place(staged); err != nil {
		os.RemoveAll(staged)
		return
	}
	if err := os.Rename(staged, dir); err != nil {
		os.RemoveAll(staged)
	}
}

// checkLease starts the lease check a commit makes before its manifest,
// so that it overlaps the commit's other work; the function returned
// waits for its answer.
func (r *ObjectRun) checkLease() func() error {
	answer := make(chan error, 1)
	go func() { answer <- r.lease.check(r.ctx) }()
	return sync.OnceValue(func() error { return <-answer })
}

// carry reads the files a manifest carries (inline, in its writer's
// reused buffer: give it back, even on error) and returns them marked,
// after files, sorted by path.
func (r *ObjectRun) carry(files []FileSum, inline InlineFiles) ([]FileSum, carried, error) {
	c, err := readInline(inline.Dir, inline.Files, r.inlineBuf.take())
	if err != nil {
		return nil, c, err
	}
	all := slices.SortedFunc(slices.Values(append(slices.Clone(files), c.sums...)),
		func(a, b FileSum) int { return strings.Compare(a.Path, b.Path) })
	return all, c, nil
}

// writeManifest encodes a checkpoint's manifest object after the files
// it carries (c) and writes it (objFiles.putManifest), with the local
// copy's manifest written beside the upload when local is set (discard
// the localManifest returned, placed or not). leased is the lease check
// made for this commit, which may still be under way while the object is
// hashed and goes up. On failure the checkpoint's objects are deleted.
func (r *ObjectRun) writeManifest(name string, rec Record, files []FileSum, c *carried, leased func() error, local bool) (localManifest, error) {
	m, err := r.files.encodeManifest(rec, files, c)
	if err != nil {
		r.deleteObjects(name)
		return localManifest{}, fmt.Errorf("committing %s: %w", name, err)
	}
	var lm localManifest
	if local {
		lm = r.writeLocalManifest(m.doc)
	}
	// The manifest is the commit point: a writer whose lease was taken
	// (its generation is over) must not commit, and must not delete the
	// objects either, which may be the new writer's under the same name.
	// The object goes up while the check ends; its last byte waits for
	// the answer.
	err = r.files.putManifest(name, m, leased, func(err error) {
		r.log.Warn("server has no conditional writes: the lease alone keeps writers apart", "error", err)
	})
	if lerr := leased(); lerr != nil {
		return lm, fmt.Errorf("committing %s: %w", name, lerr)
	}
	if err != nil {
		r.deleteObjects(name)
		return lm, err
	}
	return lm, nil
}

// record adds the record naming a checkpoint whose manifest is written
// (its segment is written in the background: appendSegmentLater), then
// applies retention. A checkpoint whose record is refused (out of step
// order, the lease lost) is taken back: Commit reports the failure.
func (r *ObjectRun) record(name string, rec Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.Checkpoint = name
	if werr := r.segmentsFailed(); werr != nil {
		// An earlier record could not be written: the run stops here, but
		// this checkpoint is whole, and the next writer rebuilds its
		// record from its manifest.
		return fmt.Errorf("committing %s: %w", name, werr)
	}
	err := r.open()
	if err == nil {
		if n := len(r.recs); n > 0 && rec.Step < r.recs[n-1].Step {
			err = fmt.Errorf("%w: step %d is lower than step %d, the last recorded", ErrInvalidRecord, rec.Step, r.recs[n-1].Step)
		}
	}
	if err == nil {
		err = r.appendSegmentLater(rec)
	}
	if err != nil {
		if derr := r.removeCheckpoint(name); derr != nil {
			return fmt.Errorf("committing %s: %w (and removing it: %w)", name, err, derr)
		}
		return fmt.Errorf("committing %s: %w", name, err)
	}
	r.live[name], r.intact[name] = true, true
	recorded := r.segs // this record's segment write
	r.callHook(pointRecorded)
	// Retention runs off the commit's path: the dropped checkpoints leave
	// this writer's view now, their manifests and then their files the
	// store in the background (Close waits). A crash before that leaves
	// them for the next OpenObject's retention, or its orphan clean-up.
	for _, drop := range Prune(r.liveRecords(), r.policy) {
		r.forget(drop)
		r.bg.Go(func() {
			// Not before the newer record is written: until then a
			// reader finds the newer checkpoint by its record only.
			if <-recorded.done; recorded.err != nil {
				return // left for the next OpenObject's retention
			}
			// Nor by a writer whose lease was taken since its commit: the
			// checkpoint is the new writer's to keep or drop.
			if err := r.lease.check(r.ctx); err != nil {
				return
			}
			if err := r.deleteManifest(drop); err != nil {
				r.log.Warn("retention could not delete checkpoint", "checkpoint", drop, "error", err)
				return
			}
			r.callHook(pointUnmanifestd)
			if err := r.deleteObjects(drop); err != nil {
				r.log.Warn("retention could not delete checkpoint files", "checkpoint", drop, "error", err)
			}
		})
	}
	return nil
}

// liveRecords returns the records of live checkpoints. mu is held.
func (r *ObjectRun) liveRecords() []Record {
	var out []Record
	for _, rec := range r.recs {
		if rec.Checkpoint != "" && r.live[rec.Checkpoint] {
			out = append(out, rec)
		}
	}
	return out
}

// removeCheckpoint deletes a checkpoint: its manifest first, so that it
// stops existing at once, then its files (what a crash leaves of them is
// an orphan the next OpenObject removes).
func (r *ObjectRun) removeCheckpoint(name string) error {
	if err := r.deleteManifest(name); err != nil {
		return err
	}
	r.forget(name)
	r.callHook(pointUnmanifestd)
	return r.deleteObjects(name)
}

// deleteManifest deletes a checkpoint's manifest, and so the checkpoint.
func (r *ObjectRun) deleteManifest(name string) error {
	if err := r.st.Delete(r.ctx, r.ckptKey(name, ManifestFile)); err != nil {
		return fmt.Errorf("deleting manifest of %s: %w", name, err)
	}
	return nil
}

// forget drops a checkpoint from the writer's view, and its local copy in
// the background (Close waits). mu is held.
func (r *ObjectRun) forget(name string) {
	delete(r.live, name)
	delete(r.intact, name)
	dir := filepath.Join(r.local, name)
	r.bg.Go(func() { os.RemoveAll(dir) })
}

// deleteObjects deletes every object under a checkpoint's prefix.
func (r *ObjectRun) deleteObjects(name string) error {
	if err := r.lease.lost(); err != nil {
		return err // the new writer removes what is an orphan
	}
	objs, err := r.st.List(r.ctx, objstore.ListOptions{Prefix: r.ckptKey(name, "")})
	if err != nil {
		return fmt.Errorf("listing checkpoint %s: %w", name, err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	if err := r.st.DeleteMany(r.ctx, keys); err != nil {
		return fmt.Errorf("deleting checkpoint %s: %w", name, err)
	}
	return nil
}
