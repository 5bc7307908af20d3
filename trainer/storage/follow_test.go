package storage

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// storageRoot is a storage path on one backend, with the options its
// openers need.
type storageRoot struct {
	name string
	make func(t *testing.T) (root string, opts []Option)
}

// eachRoot runs a test on a directory and on an S3 prefix (skipped
// without an S3 server binary), each opened by path as a user names it.
func eachRoot(t *testing.T, test func(t *testing.T, root string, opts []Option)) {
	for _, tc := range []storageRoot{
		{"fs", func(t *testing.T) (string, []Option) { return t.TempDir(), nil }},
		{"s3", s3Root},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, opts := tc.make(t)
			test(t, root, opts)
		})
	}
}

// s3Root is a prefix on a fresh S3 server (the test skips without an S3
// server binary), with this process's AWS chain set to reach it.
func s3Root(t *testing.T) (string, []Option) {
	srv := s3test.Start(t)
	srv.SetKeys(t)
	return "s3://" + srv.Bucket + "/runs", []Option{WithObjectConfig(objstore.Config{
		Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true})}
}

func stepsOf(recs []Record) []int64 {
	var out []int64
	for _, r := range recs {
		out = append(out, r.Step)
	}
	return out
}

func checkpointsOf(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Checkpoint)
	}
	return out
}

// A Follower returns only what was written since it last looked, on both
// backends: the checkpoints that exist (retention's deletions drop out),
// a history a resumed run rolled back comes whole with Reset, and the
// failure mark is read through it.
func TestFollower(t *testing.T) {
	eachRoot(t, func(t *testing.T, root string, opts []Option) {
		ctx := context.Background()
		f, err := Follow(ctx, root, "r", opts...)
		must.NoError(t, err)
		defer f.Close()
		got, err := f.Next()
		must.NoError(t, err)
		must.SliceEmpty(t, got.Records)
		must.False(t, got.Reset, must.Sprint("a run not started yet is no reset"))

		open := func() RunStore {
			w, err := OpenStore(ctx, root, "r", Policy{NumToKeep: 1}, append(opts, WithLocalDir(t.TempDir()))...)
			must.NoError(t, err)
			return w
		}
		w := open()
		defer func() { w.Close() }()
		// settle waits for what a writer may do after Commit returns (on S3
		// the record and retention's deletions can follow in the
		// background): Close waits for it, and the run is opened again, as
		// a resumed writer opens it.
		settle := func() {
			must.NoError(t, w.Close())
			w = open()
		}
		appendAll := func(steps ...int64) {
			for _, s := range steps {
				must.NoError(t, w.Append(Record{Step: s, Metrics: map[string]any{"loss": 1 / float64(s+1)}}))
			}
		}
		commit := func(step int64) {
			commitRS(t, w, map[string]string{"model.bin": "w"}, Record{Step: step, Metrics: map[string]any{"loss": 0.5}})
			settle()
		}
		type step struct {
			name      string
			do        func()
			want      []int64
			wantReset bool
			wantCkpts []string
			moved     bool
		}
		for _, tc := range []step{
			{name: "first look", do: func() { appendAll(1, 2) }, want: []int64{1, 2}},
			{name: "nothing new", do: func() {}},
			{name: "a checkpoint", do: func() { commit(3) }, want: []int64{3},
				wantCkpts: []string{"checkpoint_000000"}, moved: true},
			{name: "retention deletes the first", do: func() { commit(4); appendAll(5, 6) }, want: []int64{4, 5, 6},
				wantCkpts: []string{"checkpoint_000001"}, moved: true},
			{name: "rolled back on resume", do: func() { must.NoError(t, w.TruncateAfter(4)) },
				want: []int64{1, 2, 3, 4}, wantReset: true, wantCkpts: []string{"checkpoint_000001"}, moved: true},
			{name: "appended after the rollback", do: func() { appendAll(5) }, want: []int64{5},
				wantCkpts: []string{"checkpoint_000001"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.do()
				got, err := f.Next()
				must.NoError(t, err)
				must.Eq(t, tc.want, stepsOf(got.Records))
				must.Eq(t, tc.wantReset, got.Reset)
				must.Eq(t, tc.wantCkpts, checkpointsOf(got.Checkpoints))
				must.Eq(t, tc.moved, got.CheckpointsChanged)
			})
		}

		_, failed, err := f.Failed("")
		must.NoError(t, err)
		must.False(t, failed)
		must.NoError(t, MarkFailed(root, "r", Failure{Reason: "boom", ExitCode: 3}, opts...))
		fail, failed, err := f.Failed("")
		must.NoError(t, err)
		must.True(t, failed)
		must.EqOp(t, "boom", fail.Reason)
	})
}

// On a directory a torn last line waits for its end, and a progress file
// that is a symbolic link is refused, as storage's readers refuse it.
func TestFollowerFileEdges(t *testing.T) {
	root := t.TempDir()
	w, err := Open(root, "r", Policy{})
	must.NoError(t, err)
	defer w.Close()
	must.NoError(t, w.Append(Record{Step: 1, Metrics: map[string]any{}}))
	f, err := Follow(context.Background(), root, "r")
	must.NoError(t, err)
	got, err := f.Next()
	must.NoError(t, err)
	must.Eq(t, []int64{1}, stepsOf(got.Records))
	path := filepath.Join(root, "r", ProgressFile)
	appendRaw := func(s string) {
		fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		must.NoError(t, err)
		_, err = fh.WriteString(s)
		must.NoError(t, err)
		must.NoError(t, fh.Close())
	}
	appendRaw(`{"step":2,"time":"2026-12-02T15:04:05Z","metrics":{}`)
	got, err = f.Next()
	must.NoError(t, err)
	must.SliceEmpty(t, got.Records)
	appendRaw("}\n")
	got, err = f.Next()
	must.NoError(t, err)
	must.Eq(t, []int64{2}, stepsOf(got.Records))

	dir := t.TempDir()
	must.NoError(t, os.MkdirAll(filepath.Join(dir, "l"), 0o755))
	target := filepath.Join(dir, "elsewhere")
	must.NoError(t, os.WriteFile(target, nil, 0o644))
	must.NoError(t, os.Symlink(target, filepath.Join(dir, "l", ProgressFile)))
	f, err = Follow(context.Background(), dir, "l")
	must.NoError(t, err)
	_, err = f.Next()
	must.ErrorContains(t, err, "not a regular file")
}
