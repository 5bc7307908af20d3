package storage

import (
	"context"
	"io/fs"
	"testing"

	"github.com/shoenig/test/must"
)

// A note reads back as written, a second write replaces it, and a missing
// one is fs.ErrNotExist, in a directory and on S3 alike; a name that could
// be a record of the run is refused.
func TestNotes(t *testing.T) {
	eachRoot(t, func(t *testing.T, root string, opts []Option) {
		ctx := context.Background()
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
