package storage

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// ListRuns names the runs under a storage path, on both backends: those
// with progress records, not a name that holds only something else (an
// experiment's trials one level down, a lone failure mark), nor a
// scratch name; IsRun agrees.
func TestListRuns(t *testing.T) {
	eachRoot(t, func(t *testing.T, root string, opts []Option) {
		ctx := context.Background()
		runs, err := ListRuns(ctx, root, opts...)
		must.NoError(t, err)
		must.SliceEmpty(t, runs, must.Sprint("a root no run wrote to"))
		for _, at := range []struct{ root, run string }{{root, "b"}, {root, "a"}, {RunLocation(root, "exp"), "trial_0000"}} {
			w, err := OpenStore(ctx, at.root, at.run, Policy{},
				append(opts, WithLocalDir(t.TempDir()))...)
			must.NoError(t, err)
			must.NoError(t, w.Append(Record{Step: 1, Metrics: map[string]any{}}))
			must.NoError(t, w.Close())
		}
		must.NoError(t, MarkFailed(root, "only-failed", Failure{Reason: "x"}, opts...))
		if !IsObjectPath(root) {
			must.NoError(t, os.MkdirAll(filepath.Join(root, ".staging-x"), 0o755))
			must.NoError(t, os.WriteFile(filepath.Join(root, "file"), nil, 0o644))
		}
		runs, err = ListRuns(ctx, root, opts...)
		must.NoError(t, err)
		must.Eq(t, []string{"a", "b"}, runs)
		runs, err = ListRuns(ctx, RunLocation(root, "exp"), opts...)
		must.NoError(t, err)
		must.Eq(t, []string{"trial_0000"}, runs)
		for name, want := range map[string]bool{"a": true, "exp": false, "only-failed": false, "none": false} {
			ok, err := IsRun(ctx, root, name, opts...)
			must.NoError(t, err)
			must.EqOp(t, want, ok, must.Sprint(name))
		}
	})
}

func TestSplitRunPath(t *testing.T) {
	for _, tc := range []struct {
		path, root, run string
		ok              bool
	}{
		{"s3://b/runs/r", "s3://b/runs", "r", true},
		{"s3://b/runs/r/", "s3://b/runs", "r", true},
		{"s3://b/r", "s3://b", "r", true},
		{"s3://b", "", "", false},
		{"s3://b/", "", "", false},
		{"s3://b/.staging", "", "", false},
		{"./results/r", "results", "r", true},
		{"/srv/results/r", "/srv/results", "r", true},
		{"file:///srv/r", "/srv", "r", true},
		{"r", ".", "r", true},
		{"/", "", "", false},
		{".", "", "", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			root, run, ok := SplitRunPath(tc.path)
			must.EqOp(t, tc.ok, ok)
			must.EqOp(t, tc.root, root)
			must.EqOp(t, tc.run, run)
		})
	}
}
