package storage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// rankFixture is a writer of run "r" on a real S3 server and the store
// ranks open their RankStores on.
type rankFixture struct {
	st *objstore.Store
	w  *ObjectRun
}

func newRankFixture(t *testing.T) rankFixture {
	t.Helper()
	srv := s3test.Start(t)
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.Bucket, Prefix: "runs"}, objstore.Config{})
	must.NoError(t, err)
	w, err := OpenObject(context.Background(), st, "r", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	return rankFixture{st: st, w: w}
}

func (f rankFixture) rank(t *testing.T, cache string) *RankStore {
	t.Helper()
	return openRankStore(t, f.st, cache)
}

// commitByRanks commits one checkpoint of which rank i uploads files[i]
// from its own directory, as a gang on separate machines does.
func (f rankFixture) commitByRanks(t *testing.T, step int64, files []map[string]string) (string, error) {
	t.Helper()
	name, err := f.w.Reserve()
	must.NoError(t, err)
	var all []FileSum
	for _, tree := range files {
		dir := t.TempDir()
		writeTree(t, dir, tree)
		sums, err := f.rank(t, t.TempDir()).Upload(name, dir)
		if err != nil {
			must.NoError(t, f.w.Abandon(name))
			return "", err
		}
		all = append(all, sums...)
	}
	if err := f.w.CommitFiles(name, Record{Step: step}, all, InlineFiles{}); err != nil {
		return name, err
	}
	// The record's segment goes up in the background; the tests read
	// the run as a reader does.
	return name, f.w.flushed()
}

func TestRankUploadCommit(t *testing.T) {
	f := newRankFixture(t)
	name, err := f.commitByRanks(t, 3, []map[string]string{
		{"model.bin": "weights", "opt/rank-0": "a"},
		{"opt/rank-1": "b"},
		{},
	})
	must.NoError(t, err)

	ro, err := OpenObjectReadOnly(context.Background(), f.st, "r", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	defer ro.Close()
	res, err := ro.LatestIntact()
	must.NoError(t, err)
	must.EqOp(t, name, res.Name)
	must.EqOp(t, 3, res.Record.Step)
	must.Eq(t, map[string]string{"model.bin": "weights", "opt/rank-0": "a", "opt/rank-1": "b"}, readTree(t, res.Path))
}

func TestRankCommitRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []map[string]string
	}{
		{"two ranks, one name", []map[string]string{{"model.bin": "a"}, {"model.bin": "b"}}},
		{"a reserved name", []map[string]string{{ManifestFile + objCorruptSuffix: "x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRankFixture(t)
			prev, err := f.commitByRanks(t, 1, []map[string]string{{"m": "zero"}})
			must.NoError(t, err)
			_, err = f.commitByRanks(t, 2, tc.files)
			must.Error(t, err)

			res, err := f.w.LatestIntact()
			must.NoError(t, err)
			must.EqOp(t, prev, res.Name, must.Sprint("the previous checkpoint stays latest"))
			ckpts, err := f.w.listCheckpoints()
			must.NoError(t, err)
			must.MapLen(t, 1, ckpts, must.Sprint("the refused checkpoint's objects are deleted"))
		})
	}
}

func TestCommitFilesNeedsReserve(t *testing.T) {
	f := newRankFixture(t)
	name, err := f.commitByRanks(t, 1, []map[string]string{{"m": "x"}})
	must.NoError(t, err)
	must.ErrorContains(t, f.w.CommitFiles(name, Record{Step: 2}, nil, InlineFiles{}), "not reserved or is committed already")
	must.ErrorContains(t, f.w.CommitFiles("checkpoint_000009", Record{Step: 2}, nil, InlineFiles{}), "not reserved")
}

// TestFetchOncePerNode restores one checkpoint on two nodes of two ranks
// each, all at once: each node downloads it once, for both its ranks.
func TestFetchOncePerNode(t *testing.T) {
	f := newRankFixture(t)
	files := map[string]string{"model.bin": "weights", "shard/1": "one"}
	name, err := f.commitByRanks(t, 5, []map[string]string{files})
	must.NoError(t, err)

	nodes := []string{t.TempDir(), t.TempDir()}
	const localRanks = 2
	type got struct {
		dir        string
		downloaded bool
		err        error
	}
	results := make([]got, len(nodes)*localRanks)
	var wg sync.WaitGroup
	for i := range results {
		rs := f.rank(t, nodes[i/localRanks])
		wg.Go(func() {
			results[i].dir, results[i].downloaded, results[i].err = rs.Fetch(name, Record{Step: 5})
		})
	}
	wg.Wait()
	downloads := 0
	for i, g := range results {
		must.NoError(t, g.err)
		must.EqOp(t, filepath.Join(nodes[i/localRanks], name), g.dir)
		must.Eq(t, files, readTree(t, g.dir))
		if g.downloaded {
			downloads++
		}
	}
	must.EqOp(t, len(nodes), downloads, must.Sprint("one download per node"))
}

func TestFetchVerifies(t *testing.T) {
	for _, tc := range []struct {
		name string
		// local prepares the node's cache, break_ the store.
		local  func(t *testing.T, dir string)
		break_ func(t *testing.T, st *objstore.Store, name string)
		want   string
	}{
		{
			name: "object changed",
			break_: func(t *testing.T, st *objstore.Store, name string) {
				_, err := st.Put(context.Background(), "r/checkpoints/"+name+"/model.bin", bytes.NewReader([]byte("WEIGHTS")))
				must.NoError(t, err)
			},
			want: "sha256",
		},
		{
			// This node's own files of the checkpoint, from its upload,
			// are not a whole copy: they are replaced.
			name: "partial local copy",
			local: func(t *testing.T, dir string) {
				writeTree(t, dir, map[string]string{"shard/1": "one"})
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRankFixture(t)
			name, err := f.commitByRanks(t, 5, []map[string]string{{"model.bin": "weights", "shard/1": "one"}})
			must.NoError(t, err)
			cache := t.TempDir()
			if tc.local != nil {
				tc.local(t, filepath.Join(cache, name))
			}
			if tc.break_ != nil {
				tc.break_(t, f.st, name)
			}
			dir, _, err := f.rank(t, cache).Fetch(name, Record{Step: 5})
			if tc.want != "" {
				var bad *CheckpointError
				must.ErrorAs[*CheckpointError](t, err, &bad)
				must.ErrorContains(t, err, tc.want)
				_, err := os.Stat(filepath.Join(cache, name))
				must.True(t, os.IsNotExist(err), must.Sprint("no copy is left of a checkpoint that failed its check"))
				return
			}
			must.NoError(t, err)
			must.Eq(t, map[string]string{"model.bin": "weights", "shard/1": "one"}, readTree(t, dir))
		})
	}
}

func TestKeepOnly(t *testing.T) {
	cache := t.TempDir()
	for _, d := range []string{"checkpoint_000001", "checkpoint_000002", "checkpoint_000003", "other"} {
		must.NoError(t, os.MkdirAll(filepath.Join(cache, d), 0o755))
	}
	r := &RankStore{cache: cache}
	must.NoError(t, r.KeepOnly("checkpoint_000002"))
	left, err := os.ReadDir(cache)
	must.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	must.Eq(t, []string{fetchLock, "checkpoint_000002", "checkpoint_000003", "other"}, names)
}

func TestNodeCacheDir(t *testing.T) {
	a := NodeCacheDir("/base", "s3://b/p", "run one")
	must.EqOp(t, "/base", filepath.Dir(a))
	must.StrHasPrefix(t, "run_one-", filepath.Base(a))
	must.NotEq(t, a, NodeCacheDir("/base", "s3://b/q", "run one"), must.Sprint("another location, another directory"))
	must.EqOp(t, a, NodeCacheDir("/base", "s3://b/p", "run one"))
}

// After a gang's commit the writer's node holds a copy of the checkpoint,
// marked whole by its manifest only when the node's ranks hold every file;
// no temporary manifest is left behind, whether the commit succeeds or
// fails, nor, after a staged commit, in the Staged.
func TestWriterKeepsItsCopy(t *testing.T) {
	srv := s3test.Start(t)
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.Bucket}, objstore.Config{})
	must.NoError(t, err)
	cache := t.TempDir() // the writer's node cache, shared with its node's ranks
	w, err := OpenObject(context.Background(), st, "r", Policy{}, WithLocalDir(cache))
	must.NoError(t, err)
	defer w.Close()
	commit := func(otherCache string) (string, error) {
		name, err := w.Reserve()
		must.NoError(t, err)
		own := t.TempDir()
		writeTree(t, own, map[string]string{"model.bin": "weights"})
		sums, inline, err := openRankStore(t, st, cache).UploadLarge(name, own)
		must.NoError(t, err)
		other := t.TempDir()
		writeTree(t, other, map[string]string{"opt/rank-1": "moments"})
		more, err := openRankStore(t, st, otherCache).Upload(name, other)
		must.NoError(t, err)
		return name, w.CommitFiles(name, Record{Step: 1}, append(sums, more...), inline)
	}
	temps := func() []string {
		m, err := filepath.Glob(filepath.Join(cache, tempPrefix+"*"))
		must.NoError(t, err)
		return m
	}

	name, err := commit(cache) // both ranks on the writer's node
	must.NoError(t, err)
	must.Eq(t, map[string]string{"model.bin": "weights", "opt/rank-1": "moments"}, readTree(t, filepath.Join(cache, name)))
	_, err = os.Stat(filepath.Join(cache, name, ManifestFile))
	must.NoError(t, err)
	must.SliceEmpty(t, temps())

	name, err = commit(t.TempDir()) // rank 1 on another node
	must.NoError(t, err)
	must.Eq(t, map[string]string{"model.bin": "weights"}, readTree(t, filepath.Join(cache, name)))
	_, err = os.Stat(filepath.Join(cache, name, ManifestFile))
	must.True(t, os.IsNotExist(err), must.Sprint("a copy without rank 1's files is not whole"))
	must.SliceEmpty(t, temps())

	// A commit refused at the manifest (another one is there already).
	taken := func(i int64) string {
		name := checkpointName(i)
		_, err := st.Put(context.Background(), "r/"+objCheckpointDir+name+"/"+ManifestFile, strings.NewReader("{}"))
		must.NoError(t, err)
		return name
	}
	next := taken(2)
	name, err = commit(t.TempDir())
	must.EqOp(t, next, name)
	must.Error(t, err)
	must.SliceEmpty(t, temps())

	// A staged commit refused the same way leaves its Staged as it was.
	taken(3)
	s, err := w.Stage()
	must.NoError(t, err)
	writeTree(t, s.Dir(), map[string]string{"model.bin": "weights"})
	_, err = w.Commit(s, Record{Step: 2})
	must.Error(t, err)
	must.Eq(t, []string{"model.bin"}, entries(t, s.Dir()))
	must.SliceEmpty(t, temps())
	name, err = w.Commit(s, Record{Step: 2}) // under the next name
	must.NoError(t, err)
	must.Eq(t, map[string]string{"model.bin": "weights"}, readTree(t, filepath.Join(cache, name)))
	_, err = os.Stat(filepath.Join(cache, name, ManifestFile))
	must.NoError(t, err)
	must.SliceEmpty(t, temps())
}

// openRankStore opens a RankStore of run "r" with its cache at dir.
func openRankStore(t *testing.T, st *objstore.Store, dir string) *RankStore {
	t.Helper()
	r, err := NewRankStore(context.Background(), st, "r", dir)
	must.NoError(t, err)
	return r
}

// A node's cache outlives its run's objects: a person may delete a run on
// S3 and start one of the same name at the same place, whose checkpoints
// reuse the names. A copy in a cache that is of another commit than the
// one recorded (its manifest's record differs) is never restored: the
// writer's own copy replaces it at the commit, and another node's is
// downloaded again.
func TestStaleCacheCopyIsNotRestored(t *testing.T) {
	srv := s3test.Start(t)
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.Bucket}, objstore.Config{})
	must.NoError(t, err)
	ctx := context.Background()
	cache, other := t.TempDir(), t.TempDir() // the writer's node and another node
	run := func(content string) (string, Record) {
		w, err := OpenObject(ctx, st, "r", Policy{}, WithLocalDir(cache))
		must.NoError(t, err)
		name, err := w.Reserve() // as a gang commits: the writer's rank uploads its own files
		must.NoError(t, err)
		own := t.TempDir()
		writeTree(t, own, map[string]string{"model.bin": content})
		sums, inline, err := openRankStore(t, st, cache).UploadLarge(name, own)
		must.NoError(t, err)
		must.NoError(t, w.CommitFiles(name, Record{Step: 1}, sums, inline))
		recs, err := w.Records()
		must.NoError(t, err)
		must.NoError(t, w.Close())
		_, _, err = openRankStore(t, st, other).Fetch(name, recs[0])
		must.NoError(t, err)
		return name, recs[0]
	}
	first, _ := run("old")
	objs, err := st.List(ctx, objstore.ListOptions{Prefix: "r/"})
	must.NoError(t, err)
	for _, o := range objs {
		must.NoError(t, st.Delete(ctx, o.Key))
	}
	second, rec := run("new")
	must.EqOp(t, first, second, must.Sprint("the new run's checkpoint has the old one's name"))
	must.Eq(t, map[string]string{"model.bin": "new"}, readTree(t, filepath.Join(cache, second)),
		must.Sprint("the writer's copy replaced the stale one at the commit"))

	ro, err := OpenObjectReadOnly(ctx, st, "r", Policy{}, WithLocalDir(cache))
	must.NoError(t, err)
	defer ro.Close()
	res, err := ro.LatestIntact()
	must.NoError(t, err)
	must.Eq(t, map[string]string{"model.bin": "new"}, readTree(t, res.Path), must.Sprint("the writer's node"))
	dir, _, err := openRankStore(t, st, other).Fetch(second, rec)
	must.NoError(t, err)
	must.Eq(t, map[string]string{"model.bin": "new"}, readTree(t, dir), must.Sprint("another node"))
}
