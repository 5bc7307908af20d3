package storage

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

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

// download fetches a checkpoint into <local>/<name>, once per ObjectRun,
// and checks it against its manifest and record.
func (r *ObjectRun) download(rec Record) (string, error) {
	name := rec.Checkpoint
	r.mu.Lock()
	err := r.ensureLocal()
	local := r.local
	r.mu.Unlock()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(local, name)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	bad := func(problems ...string) error { return &CheckpointError{Name: name, Problems: problems} }
	b, err := r.getSmall(r.ckptKey(name, ManifestFile))
	if err != nil {
		return "", err
	}
	m, err := DecodeManifest(b)
	switch {
	case err != nil:
		return "", bad(fmt.Sprintf("unreadable manifest: %v", err))
	case m.Record.Step != rec.Step:
		return "", bad(fmt.Sprintf("manifest step %d, record step %d", m.Record.Step, rec.Step))
	}
	listed, err := r.st.List(r.ctx, objstore.ListOptions{Prefix: r.ckptKey(name, "")})
	if err != nil {
		return "", fmt.Errorf("listing checkpoint %s: %w", name, err)
	}
	var found []FileSum
	for _, o := range listed {
		rel := o.Key[len(r.ckptKey(name, "")):]
		if rel != ManifestFile {
			found = append(found, FileSum{Path: rel, Size: o.Size})
		}
	}
	if problems := m.Check(found); len(problems) > 0 {
		return "", bad(problems...)
	}
	tmp, err := os.MkdirTemp(local, tempPrefix+name+"-")
	if err != nil {
		return "", fmt.Errorf("creating restore directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	sums := make([]FileSum, len(m.Files))
	for i, f := range m.Files {
		if sums[i], err = r.fetchFile(name, tmp, f.Path); err != nil {
			return "", err
		}
	}
	if problems := m.Check(sums); len(problems) > 0 {
		return "", bad(problems...)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("placing restored checkpoint: %w", err)
	}
	return dir, nil
}

// fetchFile downloads one file of a checkpoint under dir, hashing it.
func (r *ObjectRun) fetchFile(name, dir, rel string) (FileSum, error) {
	if err := checkManifestPath(rel); err != nil {
		return FileSum{}, err
	}
	rc, _, err := r.st.Get(r.ctx, r.ckptKey(name, rel))
	if err != nil {
		return FileSum{}, err
	}
	defer rc.Close()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return FileSum{}, fmt.Errorf("restoring %s: %w", rel, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return FileSum{}, fmt.Errorf("restoring %s: %w", rel, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return FileSum{}, fmt.Errorf("restoring %s: %w", path.Join(name, rel), err)
	}
	return FileSum{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
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
	b, err := r.getSmall(key)
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
