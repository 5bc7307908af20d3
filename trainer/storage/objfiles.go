package storage

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// objFiles moves a checkpoint's files between a local directory and the
// objects under its prefix. The writer (ObjectRun) and every rank
// (RankStore) use it: each rank uploads its own files, and each node
// downloads a checkpoint once for all its ranks.
type objFiles struct {
	ctx      context.Context
	st       *objstore.Store
	run      string
	progress *Progress // counts a download's bytes; nil for none
}

// prefix returns the key prefix of a checkpoint's objects.
func (o objFiles) prefix(name string) string { return o.run + "/" + objCheckpointDir + name + "/" }

// upload puts every file under dir under the checkpoint's prefix (see
// uploadFiles) and returns their sizes and digests.
func (o objFiles) upload(dir, name string, fileDone func()) ([]FileSum, error) {
	files, err := listCheckpointFiles(dir)
	if err != nil {
		return nil, err
	}
	return o.uploadFiles(dir, name, files, fileDone)
}

// listCheckpointFiles lists the files of a checkpoint directory (Path and
// Size), refusing anything but regular files and directories.
func listCheckpointFiles(dir string) ([]FileSum, error) {
	files, problems, err := listTree(dir)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("checkpoints hold regular files and directories only: %s", strings.Join(problems, "; "))
	}
	for _, f := range files {
		if f.Path == ManifestFile+objCorruptSuffix {
			return nil, fmt.Errorf("%s is a reserved name in a checkpoint", f.Path)
		}
	}
	return files, nil
}

// uploadFiles puts the listed files under dir under the checkpoint's
// prefix, a few at a time (each big file in parallel multipart parts),
// and returns their sizes and digests, computed in the same pass.
// fileDone, when not nil, is called after each file.
func (o objFiles) uploadFiles(dir, name string, files []FileSum, fileDone func()) ([]FileSum, error) {
	files = slices.Clone(files)
	errs := make([]error, len(files))
	sem := make(chan struct{}, filesParallel)
	var wg sync.WaitGroup
	for i := range files {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			files[i], errs[i] = o.uploadFile(dir, name, files[i].Path)
			if errs[i] == nil && fileDone != nil {
				fileDone()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("uploading checkpoint %s: %w", name, err)
	}
	return files, nil
}

func (o objFiles) uploadFile(dir, name, rel string) (FileSum, error) {
	if rel == ManifestFile || rel == ManifestFile+objCorruptSuffix {
		return FileSum{}, fmt.Errorf("%s is a reserved name in a checkpoint", rel)
	}
	f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	res, err := o.st.Put(o.ctx, o.prefix(name)+rel, f)
	if err != nil {
		return FileSum{}, err
	}
	return FileSum{Path: rel, Size: res.Size, SHA256: hex.EncodeToString(res.SHA256[:])}, nil
}

// fetch makes local/name a verified copy of a committed checkpoint,
// downloading it unless a copy is there already, and says whether it
// downloaded. The processes sharing local (the ranks of one node) take
// turns under a file lock, so a node downloads a checkpoint once. A copy
// is whole once its manifest is in it; a directory without one (this
// node's own files of a checkpoint it uploaded) is replaced, and so is a
// whole copy of another commit than want, the checkpoint's record: a run
// deleted on the store and started again at the same place reuses the
// names of its checkpoints, and the node's cache outlives it. check, when
// not nil, vets the manifest before anything is downloaded.
func (o objFiles) fetch(local, name string, want Record, check func(Manifest) []string) (string, bool, error) {
	unlock, err := lockFetch(local)
	if err != nil {
		return "", false, err
	}
	defer unlock()
	dir := filepath.Join(local, name)
	if m, ok, err := ReadManifest(dir); err == nil && ok && sameCommit(m.Record, want) {
		return dir, false, nil
	}
	tmp, err := os.MkdirTemp(local, tempPrefix+name+"-")
	if err != nil {
		return "", false, fmt.Errorf("creating restore directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := o.download(name, tmp, check); err != nil {
		return "", false, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", false, fmt.Errorf("placing restored checkpoint: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", false, fmt.Errorf("placing restored checkpoint: %w", err)
	}
	return dir, true, nil
}

// sameCommit reports whether a local copy's record (its manifest's) is of
// the commit whose record is want: the same step, committed at the same
// instant. A want without a time (a caller that has no record) takes any
// copy of the step.
func sameCommit(have, want Record) bool {
	return have.Step == want.Step && (want.Time.IsZero() || have.Time.Equal(want.Time))
}

// download writes committed checkpoint name into the empty directory
// into: its files, each checked against the manifest, then the manifest
// (a checkpoint directory's plain MANIFEST.json), last. check, when not
// nil, vets the manifest before anything is downloaded. A checkpoint
// without a manifest object is ErrNoCheckpoint.
func (o objFiles) download(name, into string, check func(Manifest) []string) error {
	m, doc, carried, err := o.vetted(name, check)
	if err != nil {
		return err
	}
	o.progress.start(m)
	sums, err := copyInline(m, carried, into)
	if err != nil {
		return err
	}
	for _, f := range sums {
		o.progress.add(f.Size)
	}
	fetched, err := o.fetchFiles(name, into, m.Files)
	if err != nil {
		return err
	}
	return finishCopy(name, into, m, doc, append(sums, fetched...))
}

// fetchFiles downloads the files of checkpoint name that are objects of
// their own (not inline) into into, a few at a time, as they went up;
// the first failure stops the rest.
func (o objFiles) fetchFiles(name, into string, files []FileSum) ([]FileSum, error) {
	ctx, cancel := context.WithCancelCause(o.ctx)
	defer cancel(nil)
	oc := o
	oc.ctx = ctx
	var own []FileSum
	for _, f := range files {
		if !f.Inline {
			own = append(own, f)
		}
	}
	sums := make([]FileSum, len(own))
	sem := make(chan struct{}, filesParallel)
	var wg sync.WaitGroup
	for i, f := range own {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var err error
			if sums[i], err = oc.fetchFile(name, into, f.Path); err != nil {
				cancel(err) // the files still to start fail at once
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return sums, nil
}

// vetted reads checkpoint name's manifest object and checks it (with
// check, when not nil) and the objects under the checkpoint's prefix
// against it. It returns the manifest, its document and the bytes of the
// files it carries. A checkpoint without a manifest object is
// ErrNoCheckpoint.
func (o objFiles) vetted(name string, check func(Manifest) []string) (Manifest, []byte, []byte, error) {
	bad := func(problems ...string) error { return &CheckpointError{Name: name, Problems: problems} }
	obj, err := o.getUpTo(o.prefix(name)+ManifestFile, maxManifestObject)
	if errors.Is(err, objstore.ErrNotFound) {
		return Manifest{}, nil, nil, fmt.Errorf("%w: %s has no manifest (never committed, or removed): %w", ErrNoCheckpoint, name, err)
	}
	if err != nil {
		return Manifest{}, nil, nil, err
	}
	m, doc, carried, err := parseManifestObject(obj)
	if err != nil {
		return Manifest{}, nil, nil, bad(fmt.Sprintf("unreadable manifest: %v", err))
	}
	if check != nil {
		if problems := check(m); len(problems) > 0 {
			return Manifest{}, nil, nil, bad(problems...)
		}
	}
	listed, err := o.st.List(o.ctx, objstore.ListOptions{Prefix: o.prefix(name)})
	if err != nil {
		return Manifest{}, nil, nil, fmt.Errorf("listing checkpoint %s: %w", name, err)
	}
	var found []FileSum
	for _, f := range m.Files {
		if f.Inline {
			found = append(found, FileSum{Path: f.Path, Size: f.Size}) // read by the caller
		}
	}
	for _, obj := range listed {
		if rel := obj.Key[len(o.prefix(name)):]; rel != ManifestFile {
			found = append(found, FileSum{Path: rel, Size: obj.Size})
		}
	}
	if problems := m.Check(found); len(problems) > 0 {
		return Manifest{}, nil, nil, bad(problems...)
	}
	return m, doc, carried, nil
}

// finishCopy checks what was written of checkpoint name into into (sums)
// against its manifest m, then writes the manifest's bytes, doc, last: it
// marks the copy whole.
func finishCopy(name, into string, m Manifest, doc []byte, sums []FileSum) error {
	if problems := m.Check(sums); len(problems) > 0 {
		return &CheckpointError{Name: name, Problems: problems}
	}
	if err := os.WriteFile(filepath.Join(into, ManifestFile), doc, 0o644); err != nil {
		return fmt.Errorf("writing the copy's manifest: %w", err)
	}
	return nil
}

// fetchLock is the file the processes sharing a local directory lock
// while one of them downloads a checkpoint into it.
const fetchLock = ".fetch.lock"

// lockFetch makes the directory local and takes its fetchLock.
func lockFetch(local string) (unlock func(), err error) {
	if err := os.MkdirAll(local, 0o755); err != nil {
		return nil, fmt.Errorf("creating local directory: %w", err)
	}
	return lockWait(filepath.Join(local, fetchLock))
}

// fetchFile downloads one file of a checkpoint under dir, hashing it; a
// big file comes in ranges, several at once (GetRanged).
func (o objFiles) fetchFile(name, dir, rel string) (FileSum, error) {
	if err := checkManifestPath(rel); err != nil {
		return FileSum{}, err
	}
	rc, _, err := o.st.GetRanged(o.ctx, o.prefix(name)+rel)
	if err != nil {
		return FileSum{}, err
	}
	defer rc.Close()
	sum, err := writeFileFrom(dir, rel, o.progress.reader(rc))
	if err != nil {
		return FileSum{}, fmt.Errorf("checkpoint %s: %w", name, err)
	}
	return sum, nil
}

// getSmall reads a whole object of at most maxManifestSize bytes.
func (o objFiles) getSmall(key string) ([]byte, error) { return o.getUpTo(key, maxManifestSize) }

// getUpTo reads a whole object of at most limit bytes.
func (o objFiles) getUpTo(key string, limit int64) ([]byte, error) {
	rc, _, err := o.st.Get(o.ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is over %d bytes", key, limit)
	}
	return b, nil
}

// manifestObject is a checkpoint's manifest object (see objinline.go),
// encoded and hashed ahead of its write (encodeManifest), so that the
// hashing overlaps the lease check.
type manifestObject struct {
	doc  []byte         // the manifest's own bytes
	obj  []byte         // the whole object
	body *objstore.Body // obj, hashed; nil when bigger than a part
}

// encodeManifest renders a checkpoint's manifest after the files it
// carries (c, whose data becomes the whole object) and makes the object
// a Body when it fits one part.
func (o objFiles) encodeManifest(rec Record, files []FileSum, c *carried) (manifestObject, error) {
	rec.Checkpoint = ""
	doc, err := EncodeManifest(Manifest{Record: rec, Files: files})
	if err != nil {
		return manifestObject{}, err
	}
	sum := c.finish(doc)
	m := manifestObject{doc: doc, obj: c.data}
	if int64(len(m.obj)) <= o.st.PartSize() {
		if m.body, err = o.st.BodyOf(m.obj, sum); err != nil {
			return manifestObject{}, err
		}
	}
	return m, nil
}

// putManifest writes a checkpoint's manifest object once: with
// If-None-Match where the server supports it, so that two writers can
// never both commit a name. fence must answer nil before the object can
// exist: it is asked before the last byte goes, or, for an object
// streamed in parts, before the first.
func (o objFiles) putManifest(name string, m manifestObject, fence func() error, warn func(error)) error {
	key := o.prefix(name) + ManifestFile
	if m.body == nil {
		if err := fence(); err != nil {
			return fmt.Errorf("writing manifest of %s: %w", name, err)
		}
	}
	put := func(ifAbsent bool) error {
		var err error
		switch {
		case m.body != nil && ifAbsent:
			_, err = o.st.PutBodyIfAbsent(o.ctx, key, m.body, fence)
		case m.body != nil:
			_, err = o.st.PutBody(o.ctx, key, m.body, fence)
		case ifAbsent:
			_, err = o.st.PutIfAbsent(o.ctx, key, bytes.NewReader(m.obj))
		default:
			_, err = o.st.Put(o.ctx, key, bytes.NewReader(m.obj))
		}
		return err
	}
	err := put(true)
	if errors.Is(err, objstore.ErrConditionalUnsupported) {
		warn(err)
		err = put(false)
	}
	if errors.Is(err, objstore.ErrExists) && o.isOurs(key, m.obj) {
		// An attempt the server took, whose answer was lost (the server
		// restarted, the connection broke), and the SDK retried.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("writing manifest of %s: %w", name, err)
	}
	return nil
}

// isOurs reports whether the object at key holds exactly obj: a
// conditional write refused because the key exists was then this
// writer's own, an earlier attempt of the same request.
func (o objFiles) isOurs(key string, obj []byte) bool {
	got, err := o.getUpTo(key, int64(len(obj)))
	return err == nil && bytes.Equal(got, obj)
}
