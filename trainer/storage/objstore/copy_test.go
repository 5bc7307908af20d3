package objstore

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
)

// Copy has the server copy an object: the bytes are the source's and do
// not pass through the client (a relay between them counts what it
// carries). An object above CopyObject's limit is copied by the server
// in parts, unless the source changed since it was described; a server
// without part copies has it stream through. A missing source is
// ErrNotFound.
func TestCopy(t *testing.T) {
	srv := s3test.Start(t)
	relay := s3test.NewRelay(t, srv.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	ctx := context.Background()
	st, err := Open(ctx, "s3://"+srv.Bucket+"/runs/a%20b", Config{Endpoint: relay.Endpoint, Region: srv.Region, PathStyle: true,
		PartSize: MinPartSize})
	must.NoError(t, err)
	data := randomBytes(3*MinPartSize+5, 11)
	_, err = st.Put(ctx, "src/model weights.bin", bytes.NewReader(data))
	must.NoError(t, err)
	read := func(key string) []byte {
		body, _, err := st.Get(ctx, key)
		must.NoError(t, err)
		defer body.Close()
		b, err := io.ReadAll(body)
		must.NoError(t, err)
		return b
	}

	before := relay.Moved()
	info, err := st.Copy(ctx, "src/model weights.bin", "dst/model weights.bin")
	must.NoError(t, err)
	must.EqOp(t, int64(len(data)), info.Size)
	must.Less(t, int64(64<<10), relay.Moved()-before, must.Sprint("bytes through the client"))
	must.True(t, bytes.Equal(data, read("dst/model weights.bin")))

	// Above CopyObject's limit, the server copies it in parts: 3 parts
	// and a last of 5 bytes here.
	defer func(max, part int64) { maxCopyObject, copyPartSize = max, part }(maxCopyObject, copyPartSize)
	maxCopyObject, copyPartSize = MinPartSize, MinPartSize
	before = relay.Moved()
	info, err = st.Copy(ctx, "src/model weights.bin", "dst/in parts")
	must.NoError(t, err)
	must.EqOp(t, int64(len(data)), info.Size)
	must.Less(t, int64(64<<10), relay.Moved()-before, must.Sprint("bytes through the client"))
	must.True(t, bytes.Equal(data, read("dst/in parts")))
	must.StrHasSuffix(t, `-4"`, info.ETag, must.Sprint("an object of 4 parts"))
	ups, err := st.ListMultipartUploads(ctx, "dst/")
	must.NoError(t, err)
	must.SliceEmpty(t, ups)

	// A source replaced since it was described is not copied, and its
	// upload is aborted.
	stale, err := st.Head(ctx, "src/model weights.bin")
	must.NoError(t, err)
	_, err = st.Put(ctx, "src/model weights.bin", bytes.NewReader(randomBytes(len(data), 12)))
	must.NoError(t, err)
	_, err = st.copyInParts(ctx, "src/model weights.bin", "dst/stale", stale)
	must.ErrorIs(t, err, ErrChanged)
	_, err = st.Head(ctx, "dst/stale")
	must.ErrorIs(t, err, ErrNotFound)
	ups, err = st.ListMultipartUploads(ctx, "dst/")
	must.NoError(t, err)
	must.SliceEmpty(t, ups)
	_, err = st.Put(ctx, "src/model weights.bin", bytes.NewReader(data))
	must.NoError(t, err)

	// A server without part copies has it read and written again.
	before = relay.Moved()
	info, err = st.copyThrough(ctx, "src/model weights.bin", "dst/streamed")
	must.NoError(t, err)
	must.EqOp(t, int64(len(data)), info.Size)
	must.Greater(t, int64(2*len(data)), relay.Moved()-before, must.Sprint("read and written again"))
	must.True(t, bytes.Equal(data, read("dst/streamed")))

	_, err = st.Copy(ctx, "src/none", "dst/none")
	must.ErrorIs(t, err, ErrNotFound)
}
