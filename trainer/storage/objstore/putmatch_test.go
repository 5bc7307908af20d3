package objstore

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/shoenig/test/must"
)

// PutIfMatch replaces an object only while it is the one whose ETag the
// writer read: a second write keyed on the same ETag is refused, and so
// is one on a deleted object.
func TestPutIfMatch(t *testing.T) {
	st, _ := newStore(t, Config{PartSize: MinPartSize})
	ctx := context.Background()
	first, err := st.Put(ctx, "lease", bytes.NewReader([]byte("first")))
	must.NoError(t, err)
	second, err := st.PutIfMatch(ctx, "lease", first.ETag, bytes.NewReader([]byte("second")))
	must.NoError(t, err)
	must.NotEq(t, first.ETag, second.ETag)
	_, err = st.PutIfMatch(ctx, "lease", first.ETag, bytes.NewReader([]byte("third")))
	must.ErrorIs(t, err, ErrChanged)
	rc, info, err := st.Get(ctx, "lease")
	must.NoError(t, err)
	got, _ := io.ReadAll(rc)
	rc.Close()
	must.EqOp(t, "second", string(got))
	must.EqOp(t, second.ETag, info.ETag)

	must.NoError(t, st.Delete(ctx, "lease"))
	_, err = st.PutIfMatch(ctx, "lease", second.ETag, bytes.NewReader([]byte("fourth")))
	must.ErrorIs(t, err, ErrChanged)
	_, err = st.Head(ctx, "lease")
	must.ErrorIs(t, err, ErrNotFound)

	// A delete keyed on a stale ETag leaves the new object alone.
	third, err := st.Put(ctx, "lease", bytes.NewReader([]byte("third")))
	must.NoError(t, err)
	must.ErrorIs(t, st.DeleteIfMatch(ctx, "lease", second.ETag), ErrChanged)
	_, err = st.Head(ctx, "lease")
	must.NoError(t, err)
	must.NoError(t, st.DeleteIfMatch(ctx, "lease", third.ETag))
	_, err = st.Head(ctx, "lease")
	must.ErrorIs(t, err, ErrNotFound)
}
