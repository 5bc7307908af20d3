package storage

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// A checkpoint on an object store is written by every rank: rank 0's
// writer takes the name (Reserve); each rank uploads its own files under
// the checkpoint's prefix with its RankStore (Upload) and tells rank 0
// their sums; rank 0 writes the one manifest, last (CommitFiles), or
// deletes what was uploaded (Abandon). No directory is shared between the
// ranks, so they may run on different machines.

// Sharded is what a run's writer offers when its ranks upload their own
// checkpoint files: an ObjectRun. A Run has no need of it: the ranks share
// its directory, and the writer moves their files into the checkpoint.
type Sharded interface {
	// Reserve takes the next checkpoint name; it is never reused.
	Reserve() (string, error)
	// CommitFiles writes the manifest of a reserved checkpoint whose
	// files (every rank's) are uploaded, carrying the writer's own small
	// files (inline, left by RankStore.UploadLarge), then its record,
	// then applies retention.
	CommitFiles(name string, rec Record, files []FileSum, inline InlineFiles) error
	// Abandon deletes what was uploaded under a reserved name that will
	// not be committed.
	Abandon(name string) error
}

var _ Sharded = (*ObjectRun)(nil)

// Reserve takes the next checkpoint name for a commit whose files the
// ranks upload (see Sharded).
func (r *ObjectRun) Reserve() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.writable(); err != nil {
		return "", err
	}
	name := checkpointName(r.next)
	r.next++
	if r.reserved == nil {
		r.reserved = map[string]bool{}
	}
	r.reserved[name] = true
	return name, nil
}

// CommitFiles commits a reserved checkpoint whose files are uploaded: it
// writes the manifest (files are every rank's sums) with a conditional
// write, carrying inline's files, then the record, then applies
// retention. The checkpoint exists from the instant its manifest does.
// On failure before the manifest the uploaded objects are deleted.
// inline.Dir, when set, is taken over: its files move to the writer's
// local copy of the checkpoint, or are removed.
func (r *ObjectRun) CommitFiles(name string, rec Record, files []FileSum, inline InlineFiles) error {
	if inline.Dir != "" {
		defer os.RemoveAll(inline.Dir)
	}
	r.mu.Lock()
	err := r.writable()
	switch {
	case err != nil:
	case !r.reserved[name]:
		err = fmt.Errorf("committing %s, which was not reserved or is committed already", name)
	case rec.Checkpoint != "":
		err = fmt.Errorf("%w: checkpoint name %q is chosen by Reserve", ErrInvalidRecord, rec.Checkpoint)
	default:
		rec, err = r.prepare(rec)
	}
	delete(r.reserved, name)
	r.mu.Unlock()
	var c carried
	leased := func() error { return nil }
	if err == nil {
		// The lease is checked while the carried files are read and the
		// manifest goes up (writeManifest).
		leased = r.checkLease()
		files, c, err = r.carry(files, inline)
		defer func() { r.inlineBuf.give(c.data) }() // the whole object, once encoded
	}
	if err == nil {
		err = checkFileSums(files) // two ranks' files under one name among others
	}
	if err != nil {
		r.deleteObjects(name)
		return fmt.Errorf("committing %s: %w", name, err)
	}
	r.callHook(pointUploaded)
	local, err := r.writeManifest(name, rec, files, &c, leased, inline.Dir != "")
	defer local.discard()
	if err != nil {
		return err
	}
	r.keepOwn(inline.Dir, name, files, local)
	r.callHook(pointManifested)
	return r.record(name, rec)
}

// keepOwn moves the writer's own files of a committed checkpoint into its
// local copy, beside those the node's ranks uploaded; the copy is whole
// (its manifest is placed in it) when it holds every file.
func (r *ObjectRun) keepOwn(dir, name string, files []FileSum, manifest localManifest) {
	if dir == "" {
		return
	}
	local := filepath.Join(r.local, name)
	if _, ok, _ := ReadManifest(local); ok {
		// A whole copy of a checkpoint of this name that was committed
		// just now is of another commit: of a run deleted on the store
		// and started again at the same place (see fetch).
		r.log.Info("replacing a node copy of an earlier commit of the same name", "checkpoint", name, "dir", local)
		if err := os.RemoveAll(local); err != nil {
			r.log.Warn("could not keep the local copy of a committed checkpoint", "checkpoint", name, "error", err)
			return
		}
	}
	// Usually the copy is the writer's directory itself, renamed (one
	// call, where moving each file and removing the emptied directory
	// took as long as a tenth of a small commit); the node's other ranks
	// may have placed files there first, which the writer's then join.
	if err := placeDir(dir, local); err != nil {
		r.log.Warn("could not keep the local copy of a committed checkpoint", "checkpoint", name, "error", err)
		return
	}
	have, _, err := listTree(local)
	if err != nil || len(Manifest{Files: files}.Check(have)) > 0 {
		return
	}
	_ = manifest.place(local)
}

// Abandon deletes the uploaded objects of a reserved checkpoint that will
// not be committed (a rank's upload failed).
func (r *ObjectRun) Abandon(name string) error {
	r.mu.Lock()
	delete(r.reserved, name)
	r.mu.Unlock()
	return r.deleteObjects(name)
}

// RankStore is one rank's access to the checkpoints of a run on an object
// store, opened by every rank without the writer lease: it uploads the
// rank's own files of a checkpoint (Upload) and fetches a committed
// checkpoint into a node-local cache directory, once per node (Fetch).
// It writes nothing but checkpoint files under a reserved name, which are
// orphans, deleted by the writer, until the manifest names them.
type RankStore struct {
	files objFiles
	cache string // node-local: shared by the ranks of one machine
	log   hclog.Logger
}

// OpenRank opens the run named run under the s3:// storage path root for
// one rank, with cache as its node-local directory (see RankStore).
// WithObjectConfig gives the store's non-secret options.
func OpenRank(ctx context.Context, root, run, cache string, opts ...Option) (*RankStore, error) {
	if !IsObjectPath(root) {
		return nil, fmt.Errorf("%s is not an object store path", root)
	}
	st, err := objstore.Open(ctx, root, objectConfig(opts))
	if err != nil {
		return nil, err
	}
	return NewRankStore(ctx, st, run, cache, opts...)
}

// NewRankStore is OpenRank on an open store.
func NewRankStore(ctx context.Context, st *objstore.Store, run, cache string, opts ...Option) (*RankStore, error) {
	if err := checkRunName(run); err != nil {
		return nil, err
	}
	o := options{log: hclog.NewNullLogger()}
	for _, opt := range opts {
		opt(&o)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("creating local directory: %w", err)
	}
	return &RankStore{
		files: objFiles{ctx: ctx, st: st, run: run},
		cache: cache,
		log:   o.log.Named("storage").With("run", run, "store", st.Location().String()),
	}, nil
}

// LocalDir is the node-local cache directory.
func (r *RankStore) LocalDir() string { return r.cache }

// Upload puts the files under dir (this rank's part of checkpoint name)
// under the checkpoint's prefix, each big file in parallel parts, and
// returns their sizes and SHA-256, for rank 0's manifest. The files then
// move into the cache directory under the checkpoint's name, where the
// ranks of the node gather theirs (a partial copy: Fetch replaces it), and
// dir is removed.
func (r *RankStore) Upload(name, dir string) ([]FileSum, error) {
	files, err := r.files.upload(dir, name, nil)
	if err != nil {
		return nil, err
	}
	if err := placeDir(dir, filepath.Join(r.cache, name)); err != nil {
		r.log.Warn("could not keep the local copy of an uploaded checkpoint", "checkpoint", name, "error", err)
	}
	return files, nil
}

// UploadLarge is Upload for the writer's own rank (rank 0): it uploads the
// files under dir that the manifest will not carry (planInline) and
// returns their sums, and leaves dir, with every file, to CommitFiles,
// which carries the rest inside the manifest (one request for a small
// checkpoint) and keeps dir as the node's copy.
func (r *RankStore) UploadLarge(name, dir string) ([]FileSum, InlineFiles, error) {
	listed, err := listCheckpointFiles(dir)
	if err != nil {
		return nil, InlineFiles{}, err
	}
	small, big := planInline(listed)
	files, err := r.files.uploadFiles(dir, name, big, nil)
	if err != nil {
		return nil, InlineFiles{}, err
	}
	return files, InlineFiles{Dir: dir, Files: small}, nil
}

// Fetch returns the local directory of committed checkpoint name: a copy
// in the cache directory, downloaded and checked against the manifest by
// the first rank of the node that asks, while the others wait for it.
// rec is the checkpoint's record: a copy in the cache of another commit of
// that name is replaced (a zero Time takes any copy of rec's step).
// downloaded says whether this call downloaded it.
func (r *RankStore) Fetch(name string, rec Record) (dir string, downloaded bool, err error) {
	dir, downloaded, err = r.files.fetch(r.cache, name, rec, nil)
	if err != nil {
		return "", false, fmt.Errorf("fetching checkpoint %s: %w", name, err)
	}
	return dir, downloaded, nil
}

// KeepOnly removes from the cache every checkpoint copy but name's and
// the newer ones: a node keeps the copy it would restore from.
func (r *RankStore) KeepOnly(name string) error {
	keep, ok := checkpointIndex(name)
	if !ok {
		return fmt.Errorf("%q is not a checkpoint name", name)
	}
	unlock, err := lockWait(filepath.Join(r.cache, fetchLock))
	if err != nil {
		return err
	}
	defer unlock()
	entries, err := os.ReadDir(r.cache)
	if err != nil {
		return fmt.Errorf("reading %s: %w", r.cache, err)
	}
	for _, e := range entries {
		if i, ok := checkpointIndex(e.Name()); ok && i < keep && e.IsDir() {
			os.RemoveAll(filepath.Join(r.cache, e.Name()))
		}
	}
	return nil
}

// NodeCacheDir is the node-local directory the ranks on one machine share
// for a run kept at root (an s3:// path): in dir, named by the run and its
// location. A copy of a checkpoint found there is trusted without hashing
// it again (Fetch), so dir must be one no other user can write to.
func NodeCacheDir(dir, root, run string) string {
	loc := RunLocation(root, run)
	safe := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			return c
		}
		return '_'
	}, run)
	return filepath.Join(dir, fmt.Sprintf("%s-%x", safe, sumOf(loc)))
}

// sumOf is a short digest of s, to name a directory after it.
func sumOf(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:6]
}
