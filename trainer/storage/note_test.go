package storage

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// A note reads back as written, a second write replaces it, and a missing
// one is fs.ErrNotExist, in a directory and on S3 alike; a name that could
// be a record of the run is refused.
func TestNotes(t *testing.T) {
	for _, tc := range []struct {
		name string
		root func(t *testing.T) (string, []Option)
	}{
		{"fs", func(t *testing.T) (string, []Option) { return t.TempDir(), nil }},
		{"s3", func(t *testing.T) (string, []Option) {
			srv := s3test.Start(t)
			t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
			t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
			t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
			return "s3://" + srv.Bucket + "/runs", []Option{WithObjectConfig(objstore.Config{
				Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true})}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			root, opts := tc.root(t)
			_, err := ReadNote(ctx, root, "r", "last-config.json", opts...)
			must.ErrorIs(t, err, fs.ErrNotExist)
			must.NoError(t, WriteNote(ctx, root, "r", "last-config.json", []byte(`{"lr":0.1}`), opts...))
			must.NoError(t, WriteNote(ctx, root, "r", "last-config.json", []byte(`{"lr":0.2}`), opts...))
			b, err := ReadNote(ctx, root, "r", "last-config.json", opts...)
			must.NoError(t, err)
			must.EqOp(t, `{"lr":0.2}`, string(b))
			for _, bad := range []string{ProgressFile, FailedFile, "../last-x.json", "last-x.json/y"} {
				must.Error(t, WriteNote(ctx, root, "r", bad, nil, opts...), must.Sprint(bad))
			}
		})
	}
}
