package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

var t0 = time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)

// openT opens run "r" under root and closes it at the end of the test.
func openT(t *testing.T, root string, p Policy) *Run {
	t.Helper()
	r, err := Open(root, "r", p, WithClock(func() time.Time { return t0 }))
	must.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

// commitT stages files (relative path -> content) and commits them.
func commitT(t *testing.T, r *Run, files map[string]string, rec Record) string {
	t.Helper()
	s, err := r.Stage()
	must.NoError(t, err)
	writeTree(t, s.Dir(), files)
	name, err := r.Commit(s, rec)
	must.NoError(t, err)
	return name
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		must.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// readTree returns relative path -> content of the regular files under dir,
// the checkpoint's manifest left out.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	must.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == filepath.Join(dir, ManifestFile) {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	}))
	return out
}

// entries lists the names in the run directory, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	must.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func steps(recs []Record) []int64 {
	var out []int64
	for _, r := range recs {
		out = append(out, r.Step)
	}
	return out
}

func TestOpenRejects(t *testing.T) {
	root := t.TempDir()
	cases := []struct {
		name, root, run string
		p               Policy
		is              error
	}{
		{name: "s3", root: "s3://bucket/results", run: "r", is: ErrUnsupportedScheme},
		{name: "gs", root: "gs://bucket", run: "r", is: ErrUnsupportedScheme},
		{name: "hdfs", root: "HDFS://nn:9000/x", run: "r", is: ErrUnsupportedScheme},
		{name: "remote file uri", root: "file://otherhost/x", run: "r", is: ErrUnsupportedScheme},
		{name: "empty root", root: "", run: "r"},
		{name: "empty run", root: root, run: ""},
		{name: "run with slash", root: root, run: "a/b"},
		{name: "run escaping", root: root, run: ".."},
		{name: "dot run", root: root, run: ".staging-x"},
		{name: "bad policy", root: root, run: "r", p: Policy{NumToKeep: -2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.root, tc.run, tc.p)
			must.Error(t, err)
			if tc.is != nil {
				must.ErrorIs(t, err, tc.is)
				must.StrContains(t, err.Error(), tc.root)
			}
		})
	}
	entriesLeft, err := os.ReadDir(root)
	must.NoError(t, err)
	must.SliceEmpty(t, entriesLeft)
}

func TestOpenFileURI(t *testing.T) {
	root := t.TempDir()
	r, err := Open("file://"+root, "r", Policy{})
	must.NoError(t, err)
	defer r.Close()
	must.Eq(t, filepath.Join(root, "r"), r.Dir())
	must.Eq(t, []string{".writer.lock", ProgressFile}, entries(t, r.Dir()))
}

func TestCommitAndLatest(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	_, _, ok, err := r.Latest()
	must.NoError(t, err)
	must.False(t, ok)

	must.NoError(t, r.Append(Record{Step: 1, Metrics: map[string]any{"loss": 0.9}}))
	files := map[string]string{"model.bin": "weights", "optim/state.bin": "moments"}
	name := commitT(t, r, files, Record{Step: 2, Metrics: map[string]any{"loss": 0.5}, Generation: 3, Attempt: 1})
	must.Eq(t, "checkpoint_000000", name)

	check := func(r *Run) {
		t.Helper()
		got, path, ok, err := r.Latest()
		must.NoError(t, err)
		must.True(t, ok)
		must.Eq(t, name, got)
		must.Eq(t, filepath.Join(root, "r", name), path)
		must.Eq(t, files, readTree(t, path))
		recs, err := r.Records()
		must.NoError(t, err)
		must.Eq(t, []int64{1, 2}, steps(recs))
		must.Eq(t, name, recs[1].Checkpoint)
		must.True(t, t0.Equal(recs[1].Time))
		must.Eq(t, uint64(3), recs[1].Generation)
		must.Eq(t, 1, recs[1].Attempt)
	}
	check(r)
	must.NoError(t, r.Close())

	r2 := openT(t, root, Policy{})
	check(r2)
	must.Eq(t, Recovery{}, r2.Recovery())
	must.Eq(t, "checkpoint_000001", commitT(t, r2, map[string]string{"a": "b"}, Record{Step: 3}))
}

func TestRetentionOnCommit(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{NumToKeep: 2, ScoreAttribute: "loss", ScoreOrder: ScoreMin})
	for i, loss := range []float64{0.5, 0.3, 0.4, 0.1, 0.9} {
		commitT(t, r, map[string]string{"w": fmt.Sprint(loss)}, Record{Step: int64(i), Metrics: map[string]any{"loss": loss}})
	}
	// The two best (0.1, 0.3) and the latest (0.9) remain.
	must.Eq(t, []string{".writer.lock", "checkpoint_000001", "checkpoint_000003", "checkpoint_000004", ProgressFile}, entries(t, r.Dir()))
	best, err := r.Best(0)
	must.NoError(t, err)
	must.Eq(t, []int64{3, 1, 4}, steps(best))
	best, err = r.Best(1)
	must.NoError(t, err)
	must.Eq(t, []int64{3}, steps(best))
	name, _, _, err := r.Latest()
	must.NoError(t, err)
	must.Eq(t, "checkpoint_000004", name)
	recs, err := r.Records()
	must.NoError(t, err)
	must.Len(t, 5, recs, must.Sprint("history keeps the records of deleted checkpoints"))
}

func TestOpenRecoversTornLine(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	must.NoError(t, r.Append(Record{Step: 1}))
	commitT(t, r, map[string]string{"x": "1"}, Record{Step: 2})
	must.NoError(t, r.Close())
	path := filepath.Join(root, "r", ProgressFile)
	good, err := os.ReadFile(path)
	must.NoError(t, err)
	torn := `{"step":3,"time":"2026-12-02T15:00:00Z","checkpoint":"checkpoint_0000`
	must.NoError(t, os.WriteFile(path, append(append([]byte(nil), good...), torn...), 0o644))

	r2 := openT(t, root, Policy{})
	must.Eq(t, len(torn), r2.Recovery().TornBytes)
	recs, err := r2.Records()
	must.NoError(t, err)
	must.Eq(t, []int64{1, 2}, steps(recs))
	after, err := os.ReadFile(path)
	must.NoError(t, err)
	must.Eq(t, good, after, must.Sprint("the torn line is cut off the file"))
	must.NoError(t, r2.Append(Record{Step: 3}))
	data, err := os.ReadFile(path)
	must.NoError(t, err)
	recs, err = ReadProgress(bytes.NewReader(data))
	must.NoError(t, err)
	must.Eq(t, []int64{1, 2, 3}, steps(recs))
}

func TestOpenCorruptMiddleLine(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	for i := range 3 {
		must.NoError(t, r.Append(Record{Step: int64(i)}))
	}
	must.NoError(t, r.Close())
	path := filepath.Join(root, "r", ProgressFile)
	data, err := os.ReadFile(path)
	must.NoError(t, err)
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines[1] = []byte("{\"step\":1,\"time\":\"garbage\n")
	bad := bytes.Join(lines, nil)
	must.NoError(t, os.WriteFile(path, bad, 0o644))

	_, err = Open(root, "r", Policy{})
	var ce *CorruptError
	must.True(t, errors.As(err, &ce), must.Sprintf("got %v", err))
	must.Eq(t, 2, ce.Line)
	must.StrContains(t, err.Error(), "progress line 2 is corrupt")
	must.StrContains(t, err.Error(), path)
	after, err := os.ReadFile(path)
	must.NoError(t, err)
	must.Eq(t, bad, after, must.Sprint("a corrupt file is left for a person to inspect"))
	// The failed Open released the lock.
	r2, err := OpenReadOnly(root, "r", Policy{})
	must.NoError(t, err)
	_, err = r2.Records()
	must.True(t, errors.As(err, &ce))
}

func TestOpenRemovesDebris(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	commitT(t, r, map[string]string{"x": "0"}, Record{Step: 0})
	must.NoError(t, r.Close())
	dir := filepath.Join(root, "r")
	writeTree(t, dir, map[string]string{
		".staging-123/model.bin":             "half",
		".trash-checkpoint_000000-abc/x":     "old",
		".tmp-progress.jsonl-xyz":            "",
		"user-notes.txt":                     "not ours, kept",
		"checkpoint_000000-not-a-checkpoint": "kept too",
		"checkpoint_000004.corrupt/x":        "moved aside by an earlier restore, kept",
	})

	r2 := openT(t, root, Policy{})
	rec := r2.Recovery()
	sort.Strings(rec.Removed)
	must.Eq(t, []string{".staging-123", ".tmp-progress.jsonl-xyz", ".trash-checkpoint_000000-abc"}, rec.Removed)
	must.Eq(t, []string{".writer.lock", "checkpoint_000000", "checkpoint_000000-not-a-checkpoint", "checkpoint_000004.corrupt", ProgressFile, "user-notes.txt"}, entries(t, dir))
	// An index seen on disk is not reused, even one moved aside.
	must.Eq(t, "checkpoint_000005", commitT(t, r2, map[string]string{"x": "5"}, Record{Step: 5}))
}

func TestOpenFinishesRetention(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	for i := range 3 {
		commitT(t, r, map[string]string{"x": "x"}, Record{Step: int64(i)})
	}
	must.NoError(t, r.Close())
	r2 := openT(t, root, Policy{NumToKeep: 1})
	must.Eq(t, []string{"checkpoint_000000", "checkpoint_000001"}, r2.Recovery().Pruned)
	must.Eq(t, []string{".writer.lock", "checkpoint_000002", ProgressFile}, entries(t, r2.Dir()))
}

func TestSingleWriter(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	_, err := Open(root, "r", Policy{})
	must.ErrorIs(t, err, ErrLocked)
	must.NoError(t, r.Close())
	must.ErrorIs(t, r.Append(Record{}), ErrClosed)
	_, err = r.Stage()
	must.ErrorIs(t, err, ErrClosed)
	must.NoError(t, r.Close(), must.Sprint("Close is idempotent"))
	r2 := openT(t, root, Policy{})
	must.NoError(t, r2.Append(Record{Step: 1}))
}

func TestReadOnly(t *testing.T) {
	root := t.TempDir()
	_, err := OpenReadOnly(root, "missing", Policy{})
	must.ErrorIs(t, err, fs.ErrNotExist)

	w := openT(t, root, Policy{NumToKeep: 1})
	rd, err := OpenReadOnly(root, "r", Policy{})
	must.NoError(t, err)
	_, _, ok, err := rd.Latest()
	must.NoError(t, err)
	must.False(t, ok)

	commitT(t, w, map[string]string{"x": "0"}, Record{Step: 0})
	commitT(t, w, map[string]string{"x": "1"}, Record{Step: 1})
	name, path, ok, err := rd.Latest()
	must.NoError(t, err)
	must.True(t, ok)
	must.Eq(t, "checkpoint_000001", name)
	must.Eq(t, map[string]string{"x": "1"}, readTree(t, path))
	best, err := rd.Best(0)
	must.NoError(t, err)
	must.Eq(t, []int64{1}, steps(best), must.Sprint("the pruned checkpoint is not offered"))

	// A reader skips a line the writer is still appending and changes nothing.
	f, err := os.OpenFile(filepath.Join(w.Dir(), ProgressFile), os.O_WRONLY|os.O_APPEND, 0)
	must.NoError(t, err)
	_, err = f.WriteString(`{"step":2,`)
	must.NoError(t, err)
	must.NoError(t, f.Close())
	recs, err := rd.Records()
	must.NoError(t, err)
	must.Eq(t, []int64{0, 1}, steps(recs))

	must.ErrorIs(t, rd.Append(Record{}), ErrReadOnly)
	_, err = rd.Stage()
	must.ErrorIs(t, err, ErrReadOnly)
	must.ErrorIs(t, rd.TruncateAfter(0), ErrReadOnly)
	must.NoError(t, rd.Close())
}

func TestTruncateAfter(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	for step := int64(1); step <= 6; step++ {
		rec := Record{Step: step, Metrics: map[string]any{"step": step}}
		if step%2 == 0 {
			commitT(t, r, map[string]string{"s": fmt.Sprint(step)}, rec)
		} else {
			must.NoError(t, r.Append(rec))
		}
	}
	must.NoError(t, r.TruncateAfter(100), must.Sprint("nothing to drop"))
	must.NoError(t, r.TruncateAfter(3))
	recs, err := r.Records()
	must.NoError(t, err)
	must.Eq(t, []int64{1, 2, 3}, steps(recs))
	name, _, _, err := r.Latest()
	must.NoError(t, err)
	must.Eq(t, "checkpoint_000000", name)
	must.Eq(t, []string{".writer.lock", "checkpoint_000000", ProgressFile}, entries(t, r.Dir()))

	// Appends go to the new file, and the next index is not reused.
	must.NoError(t, r.Append(Record{Step: 4}))
	must.Eq(t, "checkpoint_000003", commitT(t, r, map[string]string{"s": "5"}, Record{Step: 5}))
	must.NoError(t, r.Close())
	r2 := openT(t, root, Policy{})
	must.Eq(t, Recovery{}, r2.Recovery())
	recs, err = r2.Records()
	must.NoError(t, err)
	must.Eq(t, []int64{1, 2, 3, 4, 5}, steps(recs))
	must.Eq[any](t, float64(2), recs[1].Metrics["step"])
}

func TestStagedAddDir(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	s, err := r.Stage()
	must.NoError(t, err)
	rank0, rank1 := filepath.Join(root, "rank0"), filepath.Join(root, "rank1")
	writeTree(t, rank0, map[string]string{"meta.json": "{}", "shards/0.bin": "zero"})
	writeTree(t, rank1, map[string]string{"shards/1.bin": "one", "shards/deep/x": "x"})
	must.NoError(t, s.AddDir(rank0))
	must.NoError(t, s.AddDir(rank1))
	must.Eq(t, map[string]string{}, readTree(t, rank1), must.Sprint("sources are emptied"))

	writeTree(t, rank1, map[string]string{"shards/0.bin": "clash"})
	must.ErrorIs(t, s.AddDir(rank1), ErrExists)

	name, err := r.Commit(s, Record{Step: 1})
	must.NoError(t, err)
	must.Eq(t, map[string]string{"meta.json": "{}", "shards/0.bin": "zero", "shards/1.bin": "one", "shards/deep/x": "x"}, readTree(t, r.CheckpointPath(name)))
	must.ErrorIs(t, s.AddDir(rank1), ErrStagedDone)
}

func TestStagedAddDirAcrossFilesystems(t *testing.T) {
	other, err := os.MkdirTemp("/dev/shm", "storage-test-")
	if err != nil {
		t.Skipf("no /dev/shm to stand for another filesystem: %v", err)
	}
	defer os.RemoveAll(other)
	root := t.TempDir()
	var a, b syscall.Stat_t
	must.NoError(t, syscall.Stat(other, &a))
	must.NoError(t, syscall.Stat(root, &b))
	if a.Dev == b.Dev {
		t.Skip("/dev/shm is on the same filesystem as the temporary directory")
	}
	r := openT(t, root, Policy{})
	s, err := r.Stage()
	must.NoError(t, err)
	writeTree(t, other, map[string]string{"model.bin": "w", "sub/opt.bin": "o"})
	must.NoError(t, os.Symlink("model.bin", filepath.Join(other, "link")))
	must.NoError(t, s.AddDir(other))
	link, err := os.Readlink(filepath.Join(s.Dir(), "link"))
	must.NoError(t, err)
	must.Eq(t, "model.bin", link, must.Sprint("a link is copied as a link"))
	// A manifest vouches for file contents only: a link, whose target lies
	// outside what it hashes, is refused.
	_, err = r.Commit(s, Record{Step: 1})
	must.ErrorContains(t, err, "link is a L")
	must.NoError(t, os.Remove(filepath.Join(s.Dir(), "link")))
	name, err := r.Commit(s, Record{Step: 1})
	must.NoError(t, err)
	path := r.CheckpointPath(name)
	must.Eq(t, map[string]string{"model.bin": "w", "sub/opt.bin": "o"}, readTree(t, path))
	left, err := os.ReadDir(other)
	must.NoError(t, err)
	must.SliceEmpty(t, left)
}

func TestCopyTreeRejectsSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	must.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	err := copyTree(dir, filepath.Join(t.TempDir(), "out"))
	must.ErrorContains(t, err, "unsupported file type")
}

func TestStagedAbort(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	s, err := r.Stage()
	must.NoError(t, err)
	writeTree(t, s.Dir(), map[string]string{"x": "1"})
	must.NoError(t, s.Abort())
	must.NoError(t, s.Abort())
	_, err = os.Stat(s.Dir())
	must.ErrorIs(t, err, fs.ErrNotExist)
	_, err = r.Commit(s, Record{})
	must.ErrorIs(t, err, ErrStagedDone)

	s2, err := r.Stage()
	must.NoError(t, err)
	_, err = r.Commit(s2, Record{})
	must.NoError(t, err)
	must.NoError(t, s2.Abort(), must.Sprint("abort after commit is a no-op"))
	_, err = r.Commit(s2, Record{})
	must.ErrorIs(t, err, ErrStagedDone)

	other := openT(t, t.TempDir(), Policy{})
	s3, err := other.Stage()
	must.NoError(t, err)
	_, err = r.Commit(s3, Record{})
	must.ErrorContains(t, err, "another run")
}

// oneCheckpoint opens a run under a new root, commits checkpoint_000000 and
// returns the root, the run and the contents of progress.jsonl.
func oneCheckpoint(t *testing.T) (string, *Run, []byte) {
	t.Helper()
	root := t.TempDir()
	r := openT(t, root, Policy{})
	commitT(t, r, map[string]string{"x": "0"}, Record{Step: 0})
	progress, err := os.ReadFile(filepath.Join(r.Dir(), ProgressFile))
	must.NoError(t, err)
	return root, r, progress
}

func TestInvalidRecordsChangeNothing(t *testing.T) {
	_, r, before := oneCheckpoint(t)
	path := filepath.Join(r.Dir(), ProgressFile)

	must.ErrorIs(t, r.Append(Record{Checkpoint: "checkpoint_000000"}), ErrInvalidRecord)
	must.ErrorIs(t, r.Append(Record{Metrics: map[string]any{"loss": math.Inf(1)}}), ErrInvalidRecord)
	s, err := r.Stage()
	must.NoError(t, err)
	_, err = r.Commit(s, Record{Metrics: map[string]any{"loss": math.NaN()}})
	must.ErrorIs(t, err, ErrInvalidRecord)
	_, err = r.Commit(s, Record{Checkpoint: "checkpoint_000009"})
	must.ErrorIs(t, err, ErrInvalidRecord)
	after, err := os.ReadFile(path)
	must.NoError(t, err)
	must.Eq(t, before, after)
	name, _, _, err := r.Latest()
	must.NoError(t, err)
	must.Eq(t, "checkpoint_000000", name)
	// The staged checkpoint is still usable.
	name, err = r.Commit(s, Record{Step: 1})
	must.NoError(t, err)
	must.Eq(t, "checkpoint_000001", name)
}

func TestConcurrentAppends(t *testing.T) {
	root := t.TempDir()
	for _, fp := range []FsyncPolicy{FsyncEveryRecord, FsyncCheckpointRecords} {
		t.Run(fp.String(), func(t *testing.T) {
			r, err := Open(root, fp.String(), Policy{NumToKeep: 2, Fsync: fp})
			must.NoError(t, err)
			defer r.Close()
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := range 10 {
						// Steps must not go back; writers racing on one
						// step keep the file in order.
						label, step := int64(g*100+i), int64(7)
						if i%5 == 0 {
							s, err := r.Stage()
							must.NoError(t, err)
							writeTree(t, s.Dir(), map[string]string{"x": fmt.Sprint(label)})
							_, err = r.Commit(s, Record{Step: step})
							must.NoError(t, err)
						} else {
							must.NoError(t, r.Append(Record{Step: step}))
						}
						_, _, _, err := r.Latest()
						must.NoError(t, err)
					}
				})
			}
			wg.Wait()
			data, err := os.ReadFile(filepath.Join(r.Dir(), ProgressFile))
			must.NoError(t, err)
			recs, err := ReadProgress(bytes.NewReader(data))
			must.NoError(t, err)
			must.Len(t, 40, recs)
			var ck []string
			for _, e := range entries(t, r.Dir()) {
				if _, ok := checkpointIndex(e); ok {
					ck = append(ck, e)
				}
			}
			must.Eq(t, []string{"checkpoint_000006", "checkpoint_000007"}, ck)
		})
	}
}

func TestRecordsReadBackAsFromFile(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	m := map[string]any{"n": int64(3), "f": float32(0.5)}
	must.NoError(t, r.Append(Record{Step: 1, Metrics: m}))
	m["n"] = "changed by the caller"
	recs, err := r.Records()
	must.NoError(t, err)
	want := map[string]any{"n": 3.0, "f": 0.5}
	must.Eq(t, want, recs[0].Metrics, must.Sprint("the writer's view equals a reader's"))
	recs[0].Metrics["n"] = "changed by a reader"
	rd, err := OpenReadOnly(root, "r", Policy{})
	must.NoError(t, err)
	fromFile, err := rd.Records()
	must.NoError(t, err)
	again, err := r.Records()
	must.NoError(t, err)
	must.Eq(t, fromFile, again)
	must.Eq(t, want, again[0].Metrics)
	must.NoError(t, rd.Close())
	_, err = rd.Records()
	must.ErrorIs(t, err, ErrClosed)
}

func TestFsyncPolicy(t *testing.T) {
	cases := []struct {
		fsync FsyncPolicy
		want  int
	}{
		{FsyncEveryRecord, 4},
		{FsyncCheckpointRecords, 1},
	}
	for _, tc := range cases {
		t.Run(tc.fsync.String(), func(t *testing.T) {
			r := openT(t, t.TempDir(), Policy{Fsync: tc.fsync})
			flushed := 0
			r.hook = func(p string) {
				if p == pointFlushed {
					flushed++
				}
			}
			for i := range 3 {
				must.NoError(t, r.Append(Record{Step: int64(i)}))
			}
			commitT(t, r, map[string]string{"x": "1"}, Record{Step: 3})
			must.Eq(t, tc.want, flushed, must.Sprint("progress fsyncs"))
		})
	}
}

func TestWriteFailureNeedsReopen(t *testing.T) {
	root, r, before := oneCheckpoint(t)
	path := filepath.Join(r.Dir(), ProgressFile)

	// Swap the progress handle for a read-only one: the record write fails,
	// and so does cutting the file back, so the Run refuses further writes.
	ro, err := os.Open(path)
	must.NoError(t, err)
	r.mu.Lock()
	good := r.progress
	r.progress = ro
	r.mu.Unlock()
	s, err := r.Stage()
	must.NoError(t, err)
	writeTree(t, s.Dir(), map[string]string{"x": "1"})
	_, err = r.Commit(s, Record{Step: 1})
	must.ErrorContains(t, err, "committing checkpoint_000001")
	must.Eq(t, []string{".writer.lock", "checkpoint_000000", ProgressFile}, entries(t, r.Dir()),
		must.Sprint("the renamed checkpoint without a record is removed"))
	name, _, _, err := r.Latest()
	must.NoError(t, err)
	must.Eq(t, "checkpoint_000000", name)
	err = r.Append(Record{Step: 2})
	must.ErrorContains(t, err, "needs reopening")
	_, err = r.Stage()
	must.ErrorContains(t, err, "needs reopening")

	r.mu.Lock()
	r.progress = good
	r.mu.Unlock()
	must.NoError(t, ro.Close())
	must.NoError(t, r.Close())
	after, err := os.ReadFile(path)
	must.NoError(t, err)
	must.Eq(t, before, after)
	r2 := openT(t, root, Policy{})
	must.Eq(t, "checkpoint_000001", commitT(t, r2, map[string]string{"x": "1"}, Record{Step: 1}))
}
