package storage

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// LatestIntact finds the checkpoint to restart from: the newest one whose
// manifest matches its record and whose objects match the manifest. It
// downloads the checkpoint into the local directory, hashing every file
// as it arrives, and returns that directory as Path. A corrupt checkpoint
// is passed over (reported in Skipped); the writer quarantines it by
// renaming its manifest to MANIFEST.json.corrupt, so it stops existing
// but its files stay for a person.
func (r *ObjectRun) LatestIntact() (Restore, error) {
	_, live, err := r.snapshot()
	if err != nil {
		return Restore{}, err
	}
	return newestIntact(live, r.log, r.quarantine, func(i int) (string, bool, error) {
		dir, err := r.download(live[i])
		if errors.Is(err, objstore.ErrNotFound) {
			return "", false, errVanished // retention deleted it while a reader fetched it
		}
		return dir, false, err
	})
}

// download fetches a checkpoint into <local>/<name>, once for every
// process that shares the local directory, and checks it against its
// manifest and record.
func (r *ObjectRun) download(rec Record) (string, error) {
	r.mu.Lock()
	err := r.ensureLocal()
	local := r.local
	r.mu.Unlock()
	if err != nil {
		return "", err
	}
	dir, downloaded, err := r.files.fetch(local, rec.Checkpoint, rec, func(m Manifest) []string {
		if m.Record.Step != rec.Step {
			return []string{fmt.Sprintf("manifest step %d, record step %d", m.Record.Step, rec.Step)}
		}
		return nil
	})
	if downloaded {
		r.log.Info("downloaded the checkpoint to resume from for this node", "checkpoint", rec.Checkpoint, "dir", dir)
	}
	return dir, err
}

// quarantine renames a corrupt checkpoint's manifest aside (writer only)
// and returns the key it moved to.
func (r *ObjectRun) quarantine(name string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readOnly {
		return "", nil
	}
	if err := r.writable(); err != nil {
		return "", err
	}
	key := r.ckptKey(name, ManifestFile)
	b, err := r.files.getUpTo(key, maxManifestObject) // with the files it carries
	if err != nil {
		return "", fmt.Errorf("moving corrupt checkpoint aside: %w", err)
	}
	to := key + objCorruptSuffix
	if _, err := r.st.Put(r.ctx, to, bytes.NewReader(b)); err != nil {
		return "", fmt.Errorf("moving corrupt checkpoint aside: %w", err)
	}
	if err := r.st.Delete(r.ctx, key); err != nil {
		return "", fmt.Errorf("moving corrupt checkpoint aside: %w", err)
	}
	delete(r.live, name)
	return to, nil
}

// Latest returns the name and local directory of the newest intact
// checkpoint; see LatestIntact.
func (r *ObjectRun) Latest() (name, path string, ok bool, err error) {
	res, err := r.LatestIntact()
	return res.Name, res.Path, res.OK, err
}
