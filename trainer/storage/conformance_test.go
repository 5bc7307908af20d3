package storage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// backend is one implementation of RunStore under the conformance suite.
type backend struct {
	name   string
	open   func(t *testing.T, p Policy) RunStore // the writer of run "r"
	openRO func(t *testing.T) RunStore
	// crash ends a writer as a killed process would: its lock goes, and
	// nothing is cleaned up.
	crash func(RunStore)
	// setHook installs a crash hook.
	setHook func(RunStore, func(string))
	// settle waits for what a writer writes after a commit returns
	// (on S3, the checkpoint's record), as a reader would.
	settle func(t *testing.T, w RunStore)
	// corrupt overwrites a file of a committed checkpoint.
	corrupt func(t *testing.T, name, file string, data []byte)
	// points maps the suite's crash points to the backend's.
	uploaded, manifested string
	// location is where a Result names a checkpoint of run "r"; opts
	// open it from there (DownloadCheckpoint).
	location func(name string) string
	opts     []Option
}

func fsBackend(t *testing.T) backend {
	root := t.TempDir()
	return backend{
		name: "fs",
		open: func(t *testing.T, p Policy) RunStore {
			r, err := Open(root, "r", p)
			must.NoError(t, err)
			return r
		},
		openRO: func(t *testing.T) RunStore {
			r, err := OpenReadOnly(root, "r", Policy{})
			must.NoError(t, err)
			return r
		},
		crash:   func(r RunStore) { r.(*Run).closeFiles() },
		setHook: func(r RunStore, h func(string)) { r.(*Run).hook = h },
		settle:  func(*testing.T, RunStore) {},
		corrupt: func(t *testing.T, name, file string, data []byte) {
			must.NoError(t, os.WriteFile(filepath.Join(root, "r", name, file), data, 0o644))
		},
		uploaded: pointSynced, manifested: pointRenamed,
		location: func(name string) string { return filepath.Join(root, "r", name) },
	}
}

func s3Backend(t *testing.T) backend {
	srv := s3test.Start(t)
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.Bucket, Prefix: "runs"}, objstore.Config{})
	must.NoError(t, err)
	ctx := context.Background()
	return backend{
		name: "s3",
		open: func(t *testing.T, p Policy) RunStore {
			r, err := OpenObject(ctx, st, "r", p, WithLocalDir(t.TempDir()))
			must.NoError(t, err)
			return r
		},
		openRO: func(t *testing.T) RunStore {
			r, err := OpenObjectReadOnly(ctx, st, "r", Policy{}, WithLocalDir(t.TempDir()))
			must.NoError(t, err)
			return r
		},
		crash:   func(r RunStore) { r.(*ObjectRun).lease.release(ctx) },
		setHook: func(r RunStore, h func(string)) { r.(*ObjectRun).hook.Store(&h) },
		settle:  func(t *testing.T, w RunStore) { must.NoError(t, w.(*ObjectRun).flushed()) },
		corrupt: func(t *testing.T, name, file string, data []byte) {
			key := "r/checkpoints/" + name + "/"
			if !corruptInline(t, st, key+ManifestFile, file, data) {
				_, err := st.Put(ctx, key+file, bytes.NewReader(data))
				must.NoError(t, err)
			}
		},
		uploaded: pointUploaded, manifested: pointManifested,
		location: func(name string) string { return "s3://" + srv.Bucket + "/runs/r/checkpoints/" + name },
		opts: []Option{
			WithObjectConfig(objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}),
			WithTaskEnviron([]string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}),
		},
	}
}

// eachBackend runs a conformance test on every backend; the S3 one skips
// without an S3 server binary.
func eachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	for _, tc := range []struct {
		name string
		mk   func(*testing.T) backend
	}{{"fs", fsBackend}, {"s3", s3Backend}} {
		t.Run(tc.name, func(t *testing.T) { test(t, tc.mk(t)) })
	}
}

func commitRS(t *testing.T, r RunStore, files map[string]string, rec Record) string {
	t.Helper()
	s, err := r.Stage()
	must.NoError(t, err)
	writeTree(t, s.Dir(), files)
	name, err := r.Commit(s, rec)
	must.NoError(t, err)
	return name
}

func ckptNames(recs []Record) []string {
	var out []string
	for _, rec := range recs {
		out = append(out, rec.Checkpoint)
	}
	return out
}

func TestConformanceCommitRestore(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		w := b.open(t, Policy{})
		must.NoError(t, w.Append(Record{Step: 0, Metrics: map[string]any{"loss": 1.0}}))
		files := map[string]string{"model.bin": "weights", "sub/opt.bin": "state"}
		name := commitRS(t, w, files, Record{Step: 1, Metrics: map[string]any{"loss": 0.5}})
		must.EqOp(t, "checkpoint_000000", name)
		recs, err := w.Records()
		must.NoError(t, err)
		must.Eq(t, []string{"", name}, ckptNames(recs))
		res, err := w.LatestIntact()
		must.NoError(t, err)
		must.True(t, res.OK)
		must.Eq(t, files, readTree(t, res.Path))
		must.NoError(t, w.Close())

		ro := b.openRO(t)
		defer ro.Close()
		recs, err = ro.Records()
		must.NoError(t, err)
		must.Eq(t, []string{"", name}, ckptNames(recs))
		must.Eq(t, 0.5, recs[1].Metrics["loss"])
		res, err = ro.LatestIntact()
		must.NoError(t, err)
		must.EqOp(t, name, res.Name)
		must.Eq(t, files, readTree(t, res.Path))
	})
}

func TestConformanceRetention(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		p := Policy{NumToKeep: 1, ScoreAttribute: "loss", ScoreOrder: ScoreMin}
		w := b.open(t, p)
		var ns []string
		for i, loss := range []float64{0.5, 0.1, 0.3} {
			ns = append(ns, commitRS(t, w, map[string]string{"m": "x"}, Record{Step: int64(i), Metrics: map[string]any{"loss": loss}}))
		}
		best, err := w.Best(0)
		must.NoError(t, err)
		must.Eq(t, []string{ns[1], ns[2]}, ckptNames(best)) // the best, and the latest
		must.NoError(t, w.Close())
		ro := b.openRO(t)
		defer ro.Close()
		best, err = ro.Best(0) // ranked by recency: the reader's policy has no score
		must.NoError(t, err)
		must.Eq(t, []string{ns[2], ns[1]}, ckptNames(best))
	})
}

func TestConformanceTruncateAfter(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		w := b.open(t, Policy{})
		for i := range 3 {
			commitRS(t, w, map[string]string{"m": "x"}, Record{Step: int64(i)})
		}
		must.NoError(t, w.TruncateAfter(1))
		recs, err := w.Records()
		must.NoError(t, err)
		must.Eq(t, []string{"checkpoint_000000", "checkpoint_000001"}, ckptNames(recs))
		must.NoError(t, w.Close())
		w = b.open(t, Policy{})
		defer w.Close()
		res, err := w.LatestIntact()
		must.NoError(t, err)
		must.EqOp(t, "checkpoint_000001", res.Name)
		recs, err = w.Records()
		must.NoError(t, err)
		must.SliceLen(t, 2, recs)
	})
}

func TestConformanceFollow(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		w := b.open(t, Policy{})
		defer w.Close()
		must.NoError(t, w.Append(Record{Step: 0}))
		ro := b.openRO(t)
		defer ro.Close()
		recs, err := ro.Records()
		must.NoError(t, err)
		must.SliceLen(t, 1, recs)
		must.NoError(t, w.Append(Record{Step: 1}))
		commitRS(t, w, map[string]string{"m": "x"}, Record{Step: 2})
		b.settle(t, w)
		recs, err = ro.Records()
		must.NoError(t, err)
		must.Eq(t, []string{"", "", "checkpoint_000000"}, ckptNames(recs))
		best, err := ro.Best(0)
		must.NoError(t, err)
		must.SliceLen(t, 1, best)
	})
}

// bigPart is too big for an object store's manifest to carry, so that a
// crash can leave its object behind; "m", beside it, is carried.
var bigPart = strings.Repeat("more", inlineWhole/4+1)

// crashAt commits checkpoint 1 with a hook that stops the writer at
// point, then ends the writer as a crash would. Checkpoint 0's record,
// which an object store writes in the background, is written first: the
// crash is checkpoint 1's alone (a crash that also lost checkpoint 0's
// record would have the next writer rebuild both).
func crashAt(t *testing.T, b backend, point string) {
	w := b.open(t, Policy{})
	commitRS(t, w, map[string]string{"m": "zero"}, Record{Step: 0})
	b.settle(t, w)
	b.setHook(w, func(p string) {
		if p == point {
			panic(p)
		}
	})
	func() {
		defer func() { must.Eq(t, any(point), recover()) }()
		s, err := w.Stage()
		must.NoError(t, err)
		writeTree(t, s.Dir(), map[string]string{"m": "one", "big/part": bigPart})
		_, _ = w.Commit(s, Record{Step: 1})
	}()
	b.crash(w)
}

func TestConformanceOrphanCleanup(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		crashAt(t, b, b.uploaded)
		w := b.open(t, Policy{})
		defer w.Close()
		must.SliceNotEmpty(t, recoveryOf(w).Removed)
		res, err := w.LatestIntact()
		must.NoError(t, err)
		must.EqOp(t, "checkpoint_000000", res.Name)
		must.Eq(t, map[string]string{"m": "zero"}, readTree(t, res.Path))
		recs, err := w.Records()
		must.NoError(t, err)
		must.SliceLen(t, 1, recs)
		name := commitRS(t, w, map[string]string{"m": "two"}, Record{Step: 2})
		res, err = w.LatestIntact()
		must.NoError(t, err)
		must.EqOp(t, name, res.Name)
		must.Eq(t, map[string]string{"m": "two"}, readTree(t, res.Path))
	})
}

func TestConformanceManifestMeansCommitted(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		crashAt(t, b, b.manifested)
		w := b.open(t, Policy{})
		defer w.Close()
		must.Eq(t, []string{"checkpoint_000001"}, recoveryOf(w).Rebuilt)
		res, err := w.LatestIntact()
		must.NoError(t, err)
		must.EqOp(t, "checkpoint_000001", res.Name)
		must.Eq(t, map[string]string{"m": "one", "big/part": bigPart}, readTree(t, res.Path))
	})
}

func TestConformanceCorruptFallback(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		w := b.open(t, Policy{})
		commitRS(t, w, map[string]string{"m": "zero"}, Record{Step: 0})
		commitRS(t, w, map[string]string{"m": "one!"}, Record{Step: 1})
		must.NoError(t, w.Close())
		b.corrupt(t, "checkpoint_000001", "m", []byte("bad!"))
		w = b.open(t, Policy{})
		defer w.Close()
		res, err := w.LatestIntact()
		must.NoError(t, err)
		must.EqOp(t, "checkpoint_000000", res.Name)
		must.SliceLen(t, 1, res.Skipped)
		must.EqOp(t, "checkpoint_000001", res.Skipped[0].Name)
		must.ErrorIs(t, res.Skipped[0].Err, ErrCorruptCheckpoint)
		must.Eq(t, map[string]string{"m": "zero"}, readTree(t, res.Path))
		// Quarantined, it no longer exists for a reader either.
		best, err := w.Best(0)
		must.NoError(t, err)
		must.Eq(t, []string{"checkpoint_000000"}, ckptNames(best))
	})
}

func recoveryOf(r RunStore) Recovery {
	switch r := r.(type) {
	case *Run:
		return r.Recovery()
	case *ObjectRun:
		return r.Recovery()
	}
	return Recovery{}
}

// corruptInline replaces the bytes of file inside a manifest object that
// carries it, and says whether it did.
func corruptInline(t *testing.T, st *objstore.Store, key, file string, data []byte) bool {
	m, doc, carried := getManifestObject(t, st, key)
	var out []byte
	var off int64
	found := false
	for _, f := range m.Files {
		if !f.Inline {
			continue
		}
		part := carried[off : off+f.Size]
		if f.Path == file {
			part, found = data, true
		}
		out = append(out, part...)
		off += f.Size
	}
	if found {
		putManifestObject(t, st, key, out, doc)
	}
	return found
}
