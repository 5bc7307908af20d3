package objstore

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
)

// getLog is a transport that notes each GET's Range and If-Match.
type getLog struct {
	mu   sync.Mutex
	gets []http.Header
}

func (g *getLog) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && req.URL.Query().Get("list-type") == "" {
		g.mu.Lock()
		g.gets = append(g.gets, http.Header{"Range": req.Header.Values("Range"), "If-Match": req.Header.Values("If-Match")})
		g.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (g *getLog) take() []http.Header {
	g.mu.Lock()
	defer g.mu.Unlock()
	gets := g.gets
	g.gets = nil
	return gets
}

func loggedStore(t *testing.T, srv *s3test.Server, cfg Config) (*Store, *getLog) {
	log := &getLog{}
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String(srv.Endpoint), Region: srv.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
		HTTPClient:  &http.Client{Transport: log},
	})
	st, err := New(client, Location{Bucket: srv.Bucket, Prefix: "ranged"}, cfg)
	must.NoError(t, err)
	return st, log
}

// GetRanged reads any object whole and in order: one of a part in one
// request, as Get does, a bigger one in ranges of a part, each after the
// first of the same object (If-Match); its Len says what is left.
func TestGetRanged(t *testing.T) {
	srv := s3test.Start(t)
	st, log := loggedStore(t, srv, Config{PartSize: MinPartSize, Concurrency: 2})
	ctx := context.Background()
	for i, tc := range []struct {
		name   string
		size   int
		ranges int
	}{
		{"empty", 0, 0},
		{"1MiB", 1 << 20, 1},
		{"one-part", MinPartSize, 1},
		{"one-part-and-a-byte", MinPartSize + 1, 2},
		{"23MiB", 23 << 20, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(tc.size, uint64(i))
			_, err := st.Put(ctx, tc.name, bytes.NewReader(data))
			must.NoError(t, err)
			log.take()
			rc, info, err := st.GetRanged(ctx, tc.name)
			must.NoError(t, err)
			must.EqOp(t, int64(tc.size), info.Size)
			must.EqOp(t, tc.size, rc.(interface{ Len() int }).Len())
			n, err := rc.Read(nil) // returns, with nothing (and EOF if that is all)
			must.Zero(t, n)
			if tc.size > 0 {
				must.NoError(t, err)
			}
			got, err := io.ReadAll(iotest.HalfReader(rc))
			must.NoError(t, err)
			must.True(t, bytes.Equal(data, got), must.Sprintf("%d bytes differ", tc.size))
			must.EqOp(t, 0, rc.(interface{ Len() int }).Len())
			must.NoError(t, rc.Close())

			gets := log.take()
			if tc.size == 0 {
				// No first byte to ask for: then the whole object.
				must.Len(t, 2, gets)
				must.SliceEmpty(t, gets[1]["Range"])
				return
			}
			must.Len(t, tc.ranges, gets)
			must.Eq(t, []string{"bytes=0-5242879"}, gets[0]["Range"])
			must.SliceEmpty(t, gets[0]["If-Match"])
			for _, g := range gets[1:] {
				must.SliceLen(t, 1, g["Range"])
				must.Eq(t, []string{info.ETag}, g["If-Match"])
			}
		})
	}
}

// An object replaced while it is read in ranges fails the read with
// ErrChanged: no range of the new object is spliced in. A body closed
// part-way stops its fetches and fails later reads.
func TestGetRangedDoesNotSpliceAReplacedObject(t *testing.T) {
	srv := s3test.Start(t)
	st, _ := loggedStore(t, srv, Config{PartSize: MinPartSize, Concurrency: 1})
	ctx := context.Background()
	data := randomBytes(23<<20, 1)
	_, err := st.Put(ctx, "model.bin", bytes.NewReader(data))
	must.NoError(t, err)

	rc, _, err := st.GetRanged(ctx, "model.bin")
	must.NoError(t, err)
	head := make([]byte, 1<<20)
	_, err = io.ReadFull(rc, head)
	must.NoError(t, err)
	_, err = st.Put(ctx, "model.bin", bytes.NewReader(randomBytes(23<<20, 2)))
	must.NoError(t, err)
	rest, err := io.ReadAll(rc)
	must.ErrorIs(t, err, ErrChanged)
	must.True(t, bytes.Equal(data[:len(head)+len(rest)], append(head, rest...)), must.Sprint("what was read is the first object's"))
	must.NoError(t, rc.Close())

	rc, _, err = st.GetRanged(ctx, "model.bin")
	must.NoError(t, err)
	_, err = io.ReadFull(rc, head)
	must.NoError(t, err)
	must.NoError(t, rc.Close())
	_, err = rc.Read(head)
	must.Error(t, err)

	_, _, err = st.GetRanged(ctx, "none")
	must.ErrorIs(t, err, ErrNotFound)
}
