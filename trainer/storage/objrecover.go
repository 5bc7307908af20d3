package storage

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// ckptObjects is what the store holds of one checkpoint name.
type ckptObjects struct {
	manifest bool // MANIFEST.json exists: the checkpoint exists
	corrupt  bool // quarantined: its manifest was renamed aside
	keys     []string
}

// openWriter takes the lease and recovers the run. With the lease held,
// every object without a manifest was left by an earlier writer.
func (r *ObjectRun) openWriter() error {
	if err := r.lease.acquire(r.ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reload(); err != nil {
		return err
	}
	ckpts, err := r.listCheckpoints()
	if err != nil {
		return err
	}
	if err := r.removeOrphans(ckpts); err != nil {
		return err
	}
	if err := r.rebuild(ckpts); err != nil {
		return err
	}
	for _, name := range Prune(r.liveRecords(), r.policy) {
		if err := r.removeCheckpoint(name); err != nil {
			return err
		}
		r.recovery.Pruned = append(r.recovery.Pruned, name)
	}
	if len(r.recovery.Removed)+len(r.recovery.Pruned) > 0 {
		r.log.Info("recovered run", "removed", r.recovery.Removed, "pruned", r.recovery.Pruned)
	}
	return nil
}

// listCheckpoints lists every checkpoint object and sets next past every
// name in use. mu is held.
func (r *ObjectRun) listCheckpoints() (map[string]*ckptObjects, error) {
	prefix := r.key(objCheckpointDir)
	objs, err := r.st.List(r.ctx, objstore.ListOptions{Prefix: prefix})
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("listing checkpoints: %w", err)
	}
	out := map[string]*ckptObjects{}
	for _, o := range objs {
		name, file, ok := strings.Cut(strings.TrimPrefix(o.Key, prefix), "/")
		if !ok {
			continue
		}
		c := out[name]
		if c == nil {
			c = &ckptObjects{}
			out[name] = c
		}
		c.keys = append(c.keys, o.Key)
		c.manifest = c.manifest || file == ManifestFile
		c.corrupt = c.corrupt || file == ManifestFile+objCorruptSuffix
		if i, ok := checkpointIndex(name); ok && i >= r.next {
			r.next = i + 1
		}
	}
	for _, rec := range r.recs {
		if i, ok := checkpointIndex(rec.Checkpoint); ok && i >= r.next {
			r.next = i + 1
		}
	}
	return out, nil
}

// removeOrphans deletes the objects of checkpoints without a manifest
// (an upload the writer did not finish, or files retention did not get
// to) and aborts unfinished multipart uploads. Quarantined checkpoints
// are kept for a person. mu is held.
func (r *ObjectRun) removeOrphans(ckpts map[string]*ckptObjects) error {
	var keys []string
	for _, name := range slices.Sorted(maps.Keys(ckpts)) {
		c := ckpts[name]
		if c.manifest || c.corrupt {
			continue
		}
		keys = append(keys, c.keys...)
		r.recovery.Removed = append(r.recovery.Removed, name)
	}
	if err := r.st.DeleteMany(r.ctx, keys); err != nil {
		return fmt.Errorf("removing orphaned checkpoint objects: %w", err)
	}
	ups, err := r.st.ListMultipartUploads(r.ctx, r.key(""))
	if err != nil {
		return fmt.Errorf("listing unfinished uploads: %w", err)
	}
	for _, u := range ups {
		if err := r.st.AbortMultipartUpload(r.ctx, u.Key, u.ID); err != nil {
			return fmt.Errorf("aborting unfinished upload: %w", err)
		}
		r.recovery.Removed = append(r.recovery.Removed, "upload "+u.Key)
	}
	return nil
}

// rebuild marks the recorded checkpoints with a manifest live, and writes
// the records of those without one from their manifests (a crash between
// the manifest and the record). A rebuilt record's segment key sorts by
// its step, after the records of the same step. mu is held.
func (r *ObjectRun) rebuild(ckpts map[string]*ckptObjects) error {
	recorded := map[string]bool{}
	for _, rec := range r.recs {
		if rec.Checkpoint != "" {
			recorded[rec.Checkpoint] = true
			r.live[rec.Checkpoint] = ckpts[rec.Checkpoint] != nil && ckpts[rec.Checkpoint].manifest
		}
	}
	var rebuilt []Record
	for name, c := range ckpts {
		if !c.manifest || recorded[name] {
			continue
		}
		m, err := r.readManifest(name)
		if err != nil {
			return fmt.Errorf("checkpoint %s has no record and its manifest is unreadable: %w", name, err)
		}
		rec := m.Record
		rec.Checkpoint = name
		rebuilt = append(rebuilt, rec)
	}
	if len(rebuilt) == 0 {
		return nil
	}
	slices.SortFunc(rebuilt, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Step, b.Step), strings.Compare(a.Checkpoint, b.Checkpoint))
	})
	var names []string
	for _, rec := range rebuilt {
		line, err := encodeRecord(rec)
		if err != nil {
			return err
		}
		if _, err := r.st.Put(r.ctx, r.segmentKey(rec.Step, r.seq), bytes.NewReader(line)); err != nil {
			return fmt.Errorf("rebuilding record of %s: %w", rec.Checkpoint, err)
		}
		r.seq++
		r.live[rec.Checkpoint] = true
		names = append(names, rec.Checkpoint)
	}
	r.recovery.Rebuilt = names
	r.log.Warn("rebuilt the records of checkpoints from their manifests", "checkpoints", names)
	return r.reload()
}

// readManifest reads a checkpoint's manifest object (a few megabytes at
// most, with the files it carries) and decodes its manifest.
func (r *ObjectRun) readManifest(name string) (Manifest, error) {
	obj, err := r.files.getUpTo(r.ckptKey(name, ManifestFile), maxManifestObject)
	if err != nil {
		return Manifest{}, err
	}
	m, _, _, err := parseManifestObject(obj)
	return m, err
}

// listLive refreshes which recorded checkpoints exist, for a reader: one
// Head per checkpoint not yet known gone (a name never comes back). mu
// is held.
func (r *ObjectRun) listLive() error {
	for _, rec := range r.recs {
		name := rec.Checkpoint
		if name == "" {
			continue
		}
		if known, ok := r.live[name]; ok && !known {
			continue
		}
		ok, err := r.hasManifest(name)
		if err != nil {
			return err
		}
		r.live[name] = ok
	}
	return nil
}
