package storage

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// downloadFiles is a checkpoint of more than 4 MiB, so that on S3 its big
// file is an object of its own and its small files ride in the manifest.
func downloadFiles() map[string]string {
	big := make([]byte, 5<<20)
	_, _ = rand.NewChaCha8([32]byte{5}).Read(big)
	return map[string]string{"model.bin": string(big), "meta.json": `{"epoch":3}`, "sub/opt.json": `{"lr":0.1}`}
}

// The checkpoint a Result names is copied out of either backend whole:
// every file, byte for byte, and its manifest, which a copy is checked
// against again as a run's checkpoint is.
func TestConformanceDownloadCheckpoint(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		w := b.open(t, Policy{})
		defer w.Close()
		files := downloadFiles()
		first := commitRS(t, w, files, Record{Step: 1})
		commitRS(t, w, map[string]string{"model.bin": "later"}, Record{Step: 2})
		b.settle(t, w)

		out := filepath.Join(t.TempDir(), "model")
		var p Progress
		must.NoError(t, DownloadCheckpoint(ctx, b.location(first), out, append(b.opts, WithProgress(&p))...))
		must.Eq(t, files, readTree(t, out))
		var size int64
		for _, f := range files {
			size += int64(len(f))
		}
		must.EqOp(t, size, p.Total(), must.Sprint("what the download said it would write"))
		must.EqOp(t, size, p.Done(), must.Sprint("what it counted as written"))
		m, ok, err := ReadManifest(out)
		must.NoError(t, err)
		must.True(t, ok)
		must.EqOp(t, int64(1), m.Record.Step)
		must.NoError(t, DownloadCheckpoint(ctx, "file://"+out, filepath.Join(t.TempDir(), "again")),
			must.Sprint("the copy is a checkpoint directory that matches its manifest"))
		err = DownloadCheckpoint(ctx, "gs://bkt/r/checkpoint_000000", filepath.Join(t.TempDir(), "x"))
		must.ErrorIs(t, err, ErrUnsupportedScheme)

		empty := t.TempDir()
		must.NoError(t, DownloadCheckpoint(ctx, b.location(first), empty, b.opts...))
		must.Eq(t, files, readTree(t, empty))

		taken := t.TempDir()
		writeTree(t, taken, map[string]string{"mine.txt": "keep"})
		err = DownloadCheckpoint(ctx, b.location(first), taken, b.opts...)
		must.ErrorContains(t, err, "is not empty")
		must.Eq(t, map[string]string{"mine.txt": "keep"}, readTree(t, taken))

		parent := t.TempDir()
		err = DownloadCheckpoint(ctx, b.location("checkpoint_000009"), filepath.Join(parent, "x"), b.opts...)
		must.True(t, errors.Is(err, ErrNoCheckpoint), must.Sprint(err))
		assertEmptyDir(t, parent)

		// A byte changed in storage: its size still matches, so it is the
		// hash of what was copied that refuses it, and nothing is left.
		flipped := []byte(files["model.bin"])
		flipped[len(flipped)/2] ^= 1
		b.corrupt(t, first, "model.bin", flipped)
		err = DownloadCheckpoint(ctx, b.location(first), filepath.Join(parent, "x"), b.opts...)
		var ce *CheckpointError
		must.True(t, errors.As(err, &ce), must.Sprint(err))
		must.StrContains(t, err.Error(), "model.bin has sha256")
		assertEmptyDir(t, parent)
	})
}

// assertEmptyDir fails unless dir holds nothing: no destination, no scratch.
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must.NoError(t, err)
	must.SliceEmpty(t, entries)
}

// A checkpoint directory that does not match its manifest is refused
// before anything is copied: a file added, one missing, a symbolic link.
func TestDownloadCheckpointDirRefusesMismatch(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, want string
		spoil      func(t *testing.T, dir string)
	}{
		{"added", "extra.bin is not in the manifest", func(t *testing.T, dir string) {
			writeTree(t, dir, map[string]string{"extra.bin": "x"})
		}},
		{"missing", "meta.json", func(t *testing.T, dir string) {
			must.NoError(t, os.Remove(filepath.Join(dir, "meta.json")))
		}},
		{"symlink", "not a regular file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "meta.json")
			must.NoError(t, os.Remove(p))
			must.NoError(t, os.Symlink("/etc/hostname", p))
		}},
		{"no manifest", "no " + ManifestFile, func(t *testing.T, dir string) {
			must.NoError(t, os.Remove(filepath.Join(dir, ManifestFile)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			r, err := Open(root, "r", Policy{})
			must.NoError(t, err)
			name := commitRS(t, r, map[string]string{"model.bin": "weights", "meta.json": "{}"}, Record{Step: 1})
			must.NoError(t, r.Close())
			tc.spoil(t, filepath.Join(root, "r", name))
			parent := t.TempDir()
			err = DownloadCheckpoint(ctx, filepath.Join(root, "r", name), filepath.Join(parent, "out"))
			must.ErrorContains(t, err, tc.want)
			assertEmptyDir(t, parent)
		})
	}
}

func TestSplitCheckpointLocation(t *testing.T) {
	root, run, name, err := SplitCheckpointLocation("s3://bkt/a/b/qs/checkpoints/checkpoint_000019")
	must.NoError(t, err)
	must.Eq(t, []string{"s3://bkt/a/b", "qs", "checkpoint_000019"}, []string{root, run, name})
	root, run, name, err = SplitCheckpointLocation("s3://bkt/qs/checkpoints/checkpoint_000000/")
	must.NoError(t, err)
	must.Eq(t, []string{"s3://bkt", "qs", "checkpoint_000000"}, []string{root, run, name})
	root, run, name, err = SplitCheckpointLocation(CheckpointLocation("s3://bkt/p/", "qs", "checkpoint_000003"))
	must.NoError(t, err)
	must.Eq(t, []string{"s3://bkt/p", "qs", "checkpoint_000003"}, []string{root, run, name}, must.Sprint("the inverse of CheckpointLocation"))
	for _, bad := range []string{
		"s3://bkt/qs",                                    // a run, not a checkpoint
		"s3://bkt/checkpoints/checkpoint_000001",         // no run
		"s3://bkt/qs/progress/checkpoint_000001",         // not under checkpoints/
		"s3://bkt/qs/checkpoints/model.bin",              // not a checkpoint's name
		"s3://bkt/.hidden/checkpoints/checkpoint_000001", // not a run's name
		"s3://key:secret@bkt/qs/checkpoints/checkpoint_000001",
	} {
		_, _, _, err := SplitCheckpointLocation(bad)
		must.ErrorIs(t, err, ErrNotCheckpointLocation, must.Sprint(bad))
	}
}

// A run starting from another run's checkpoint fetches it once for the
// processes that share its local directory, however many ask at once; a
// copy without its manifest (a crash mid-copy cannot leave one, but a
// person might) is fetched again, and a missing checkpoint leaves nothing.
func TestConformanceFetchStartCheckpoint(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		w := b.open(t, Policy{})
		defer w.Close()
		files := downloadFiles()
		name := commitRS(t, w, files, Record{Step: 1})
		b.settle(t, w)

		local := t.TempDir()
		type got struct {
			dir     string
			fetched bool
			err     error
		}
		results := make(chan got, 4)
		for range 4 {
			go func() {
				dir, fetched, err := FetchStartCheckpoint(ctx, b.location(name), local, b.opts...)
				results <- got{dir, fetched, err}
			}()
		}
		var dirs []string
		fetches := 0
		for range 4 {
			g := <-results
			must.NoError(t, g.err)
			dirs = append(dirs, g.dir)
			if g.fetched {
				fetches++
			}
		}
		must.EqOp(t, 1, fetches, must.Sprint("one process of the four downloads it"))
		for _, d := range dirs {
			must.EqOp(t, dirs[0], d)
		}
		must.Eq(t, files, readTree(t, dirs[0]))
		must.False(t, IsCheckpointName(filepath.Base(dirs[0])), must.Sprint("the copy is not one of the run's checkpoints"))

		must.NoError(t, os.Remove(filepath.Join(dirs[0], ManifestFile)))
		dir, fetched, err := FetchStartCheckpoint(ctx, b.location(name), local, b.opts...)
		must.NoError(t, err)
		must.True(t, fetched, must.Sprint("a copy without its manifest is not whole"))
		must.Eq(t, files, readTree(t, dir))

		empty := t.TempDir()
		_, _, err = FetchStartCheckpoint(ctx, b.location("checkpoint_000009"), empty, b.opts...)
		must.ErrorIs(t, err, ErrNoCheckpoint)
		entries, err := os.ReadDir(empty)
		must.NoError(t, err)
		for _, e := range entries {
			must.EqOp(t, fetchLock, e.Name(), must.Sprint("only the lock is left"))
		}
	})
}

// A checkpoint's files come down a few at a time, each checked as it is
// written; a file that cannot be fetched fails the whole download and
// stops the files not yet started.
func TestFetchFiles(t *testing.T) {
	srv := s3test.Start(t)
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.Bucket, Prefix: "runs"}, objstore.Config{})
	must.NoError(t, err)
	ctx := context.Background()
	o := objFiles{ctx: ctx, st: st, run: "r"}
	var files []FileSum
	for i := range 12 {
		rel := fmt.Sprintf("shard-%02d/model.bin", i)
		data := bytes.Repeat([]byte{byte(i)}, 100<<10+i)
		res, err := st.Put(ctx, o.prefix("checkpoint_000001")+rel, bytes.NewReader(data))
		must.NoError(t, err)
		files = append(files, FileSum{Path: rel, Size: res.Size, SHA256: hex.EncodeToString(res.SHA256[:])})
	}
	files = append(files, FileSum{Path: "carried.json", Size: 2, Inline: true}) // not an object of its own
	into := t.TempDir()
	sums, err := o.fetchFiles("checkpoint_000001", into, files)
	must.NoError(t, err)
	must.SliceEmpty(t, (Manifest{Files: files[:12]}).Check(sums))
	b, err := os.ReadFile(filepath.Join(into, "shard-11", "model.bin"))
	must.NoError(t, err)
	must.EqOp(t, 100<<10+11, len(b))

	missing := append([]FileSum{{Path: "gone.bin", Size: 1}}, files[:12]...)
	_, err = o.fetchFiles("checkpoint_000001", t.TempDir(), missing)
	must.ErrorIs(t, err, objstore.ErrNotFound)
}

// A restore reads a file of several parts in ranges and gets it whole:
// a worker's LatestIntact on another node (an empty local directory).
func TestRestoreInRanges(t *testing.T) {
	srv := s3test.Start(t)
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.Bucket, Prefix: "runs"},
		objstore.Config{PartSize: objstore.MinPartSize, Concurrency: 2})
	must.NoError(t, err)
	ctx := context.Background()
	big := make([]byte, 3*objstore.MinPartSize+123)
	_, _ = rand.NewChaCha8([32]byte{7}).Read(big)
	files := map[string]string{"model.bin": string(big), "meta.json": `{"epoch":1}`}
	w, err := OpenObject(ctx, st, "r", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	name := commitRS(t, w, files, Record{Step: 1})
	must.NoError(t, w.Close())

	r, err := OpenObjectReadOnly(ctx, st, "r", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	defer r.Close()
	res, err := r.LatestIntact()
	must.NoError(t, err)
	must.True(t, res.OK)
	must.EqOp(t, name, res.Name)
	must.Eq(t, files, readTree(t, res.Path))
}
