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
// carries). An object above the server's limit streams through instead,
// and a missing source is ErrNotFound.
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

	defer func(max int64) { maxCopyObject = max }(maxCopyObject)
	maxCopyObject = MinPartSize
	before = relay.Moved()
	info, err = st.Copy(ctx, "src/model weights.bin", "dst/streamed")
	must.NoError(t, err)
	must.EqOp(t, int64(len(data)), info.Size)
	must.Greater(t, int64(2*len(data)), relay.Moved()-before, must.Sprint("read and written again"))
	must.True(t, bytes.Equal(data, read("dst/streamed")))

	_, err = st.Copy(ctx, "src/none", "dst/none")
	must.ErrorIs(t, err, ErrNotFound)
}
