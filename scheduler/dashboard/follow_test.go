package dashboard

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// appendSteps writes records for steps through the storage writer.
func appendSteps(t *testing.T, run *storage.Run, steps ...int64) {
	t.Helper()
	for _, s := range steps {
		must.NoError(t, run.Append(storage.Record{Step: s, Metrics: map[string]any{"loss": 1 / float64(s+1)}}))
	}
}

func steps(recs []storage.Record) []int64 {
	var out []int64
	for _, r := range recs {
		out = append(out, r.Step)
	}
	return out
}

// The follower returns only what was appended since it last looked; a
// rewritten history (a resumed run's TruncateAfter) comes whole, with
// reset; a torn line waits for its end.
func TestFollower(t *testing.T) {
	root := t.TempDir()
	run, err := storage.Open(root, "r", storage.Policy{})
	must.NoError(t, err)
	defer run.Close()
	path := filepath.Join(root, "r", storage.ProgressFile)

	f := newFollower(filepath.Join(root, "other", storage.ProgressFile))
	recs, reset, err := f.next()
	must.NoError(t, err)
	must.SliceEmpty(t, recs)
	must.False(t, reset, must.Sprint("a run not started yet is no reset"))

	f = newFollower(path)
	type step struct {
		name      string
		do        func()
		want      []int64
		wantReset bool
	}
	for _, tc := range []step{
		{name: "first look", do: func() { appendSteps(t, run, 1, 2, 3) }, want: []int64{1, 2, 3}},
		{name: "nothing new", do: func() {}},
		{name: "appended", do: func() { appendSteps(t, run, 4, 5) }, want: []int64{4, 5}},
		{name: "torn line left for later", do: func() {
			fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			must.NoError(t, err)
			_, err = fh.WriteString(`{"step":6,"time":"2026-12-02T15:04:05Z","metrics":{}`)
			must.NoError(t, err)
			must.NoError(t, fh.Close())
		}},
		{name: "torn line completed", do: func() {
			fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			must.NoError(t, err)
			_, err = fh.WriteString("}\n")
			must.NoError(t, err)
			must.NoError(t, fh.Close())
		}, want: []int64{6}},
		{name: "rewritten on resume", do: func() {
			// The writer's own view has no step 6 (written behind its back).
			must.NoError(t, run.TruncateAfter(2))
		}, want: []int64{1, 2}, wantReset: true},
		{name: "appended after the rewrite", do: func() { appendSteps(t, run, 3) }, want: []int64{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.do()
			recs, reset, err := f.next()
			must.NoError(t, err)
			must.Eq(t, tc.want, steps(recs))
			must.Eq(t, tc.wantReset, reset)
		})
	}
}

// A progress file that is a symbolic link is refused, as storage's readers
// refuse it.
func TestFollowerRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	must.NoError(t, os.WriteFile(target, nil, 0o644))
	link := filepath.Join(dir, storage.ProgressFile)
	must.NoError(t, os.Symlink(target, link))
	_, _, err := newFollower(link).next()
	must.ErrorContains(t, err, "not a regular file")
}
