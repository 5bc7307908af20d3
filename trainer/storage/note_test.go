package storage

import (
	"bytes"
	"context"
	"io/fs"
	"sync"
	"testing"
	"time"

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

// A note read while its writer keeps replacing it reads whole, the old or
// the new, and never fails: the reader's check that it opened the entry it
// looked at meets a rename in between, and looks again.
func TestNoteReadWhileReplaced(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	old, new := []byte(`{"v":"old"}`), []byte(`{"v":"new"}`)
	must.NoError(t, WriteNote(ctx, root, "r", "last-state.json", old))
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			b := old
			if i%2 == 1 {
				b = new
			}
			if err := WriteNote(ctx, root, "r", "last-state.json", b); err != nil {
				done <- err
				return
			}
		}
	}()
	stopWriter := sync.OnceValue(func() error { close(stop); return <-done })
	defer stopWriter()
	deadline := time.Now().Add(time.Second)
	reads := 0
	for ; time.Now().Before(deadline); reads++ {
		b, err := ReadNote(ctx, root, "r", "last-state.json")
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		if !bytes.Equal(b, old) && !bytes.Equal(b, new) {
			t.Fatalf("read %d: %q, neither version", reads, b)
		}
	}
	must.NoError(t, stopWriter())
	t.Logf("%d reads", reads)
}
