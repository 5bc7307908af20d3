package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
)

// newStore starts a server and returns a store on a fresh bucket under a
// prefix, so the prefix mapping is exercised by every test.
func newStore(t *testing.T, cfg Config) (*Store, *s3test.Server) {
	t.Helper()
	srv := s3test.Start(t)
	return storeOn(t, srv, cfg), srv
}

func storeOn(t *testing.T, srv *s3test.Server, cfg Config) *Store {
	t.Helper()
	st, err := New(srv.Client(t), Location{Bucket: srv.Bucket, Prefix: "runs/r1"}, cfg)
	must.NoError(t, err)
	return st
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(b)
	return b
}

func TestPutGetRoundTrip(t *testing.T) {
	st, _ := newStore(t, Config{PartSize: MinPartSize, Concurrency: 3})
	ctx := context.Background()
	cases := []struct {
		name  string
		size  int
		parts int
	}{
		{"empty", 0, 0},
		{"1MiB", 1 << 20, 0},
		{"one-full-part", MinPartSize, 0},
		{"one-part-and-a-byte", MinPartSize + 1, 2},
		{"20MiB", 20 << 20, 4},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(tc.size, uint64(i))
			key := "ckpt/" + tc.name + ".bin"
			// OneByteReader and a short-reading body: Put must not assume
			// a Read fills its buffer.
			body := iotest.HalfReader(bytes.NewReader(data))
			res, err := st.Put(ctx, key, body)
			must.NoError(t, err)
			must.EqOp(t, int64(tc.size), res.Size)
			must.EqOp(t, tc.parts, res.Parts)
			must.Eq(t, sha256.Sum256(data), res.SHA256)

			info, err := st.Head(ctx, key)
			must.NoError(t, err)
			must.EqOp(t, int64(tc.size), info.Size)

			rc, info, err := st.Get(ctx, key)
			must.NoError(t, err)
			got, err := io.ReadAll(rc)
			rc.Close()
			must.NoError(t, err)
			must.EqOp(t, int64(tc.size), info.Size)
			must.True(t, bytes.Equal(data, got), must.Sprintf("%d bytes differ", tc.size))
		})
	}
}

func TestGetRange(t *testing.T) {
	st, _ := newStore(t, Config{})
	ctx := context.Background()
	data := randomBytes(1000, 7)
	_, err := st.Put(ctx, "x", bytes.NewReader(data))
	must.NoError(t, err)
	for _, tc := range []struct{ off, n, wantFrom, wantTo int64 }{
		{0, 10, 0, 10}, {990, -1, 990, 1000}, {500, 100, 500, 600},
	} {
		t.Run(fmt.Sprint(tc.off, tc.n), func(t *testing.T) {
			rc, _, err := st.GetRange(ctx, "x", tc.off, tc.n)
			must.NoError(t, err)
			got, err := io.ReadAll(rc)
			rc.Close()
			must.NoError(t, err)
			must.Eq(t, data[tc.wantFrom:tc.wantTo], got)
		})
	}
}

func TestNotFound(t *testing.T) {
	st, srv := newStore(t, Config{})
	ctx := context.Background()
	_, err := st.Head(ctx, "missing")
	must.ErrorIs(t, err, ErrNotFound)
	must.ErrorContains(t, err, "missing")
	_, _, err = st.Get(ctx, "missing")
	must.ErrorIs(t, err, ErrNotFound)
	must.ErrorContains(t, err, "missing")
	// A missing bucket is not found too.
	other, err := New(srv.Client(t), Location{Bucket: "no-such-bucket"}, Config{})
	must.NoError(t, err)
	_, _, err = other.Get(ctx, "k")
	must.ErrorIs(t, err, ErrNotFound)
	// Deleting what is not there is fine.
	must.NoError(t, st.Delete(ctx, "missing"))
}

func TestListCursor(t *testing.T) {
	st, srv := newStore(t, Config{ListPageSize: 3})
	ctx := context.Background()
	var keys []string
	for i := range 10 {
		k := fmt.Sprintf("progress/%08d.jsonl", i)
		keys = append(keys, k)
		_, err := st.Put(ctx, k, bytes.NewReader([]byte(k)))
		must.NoError(t, err)
	}
	// Outside the listed prefix, and outside the store's prefix.
	_, err := st.Put(ctx, "progressive", bytes.NewReader(nil))
	must.NoError(t, err)
	_, err = srv.Client(t).PutObject(ctx, &s3.PutObjectInput{Bucket: &srv.Bucket, Key: aws.String("runs/r2/progress/x")})
	must.NoError(t, err)

	names := func(objs []ObjectInfo) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.Key)
		}
		return out
	}
	cases := []struct {
		name string
		opts ListOptions
		want []string
	}{
		{"all over 4 pages", ListOptions{Prefix: "progress/"}, keys},
		{"after a cursor", ListOptions{Prefix: "progress/", StartAfter: keys[6]}, keys[7:]},
		{"after the last", ListOptions{Prefix: "progress/", StartAfter: keys[9]}, nil},
		{"limit", ListOptions{Prefix: "progress/", StartAfter: keys[1], Limit: 4}, keys[2:6]},
		{"whole store", ListOptions{}, append(append([]string{}, keys...), "progressive")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.List(ctx, tc.opts)
			must.NoError(t, err)
			must.Eq(t, tc.want, names(got))
		})
	}
	// Following: a reader that keeps the last key sees only new objects.
	cursor := keys[9]
	_, err = st.Put(ctx, "progress/00000010.jsonl", bytes.NewReader(nil))
	must.NoError(t, err)
	got, err := st.List(ctx, ListOptions{Prefix: "progress/", StartAfter: cursor})
	must.NoError(t, err)
	must.Eq(t, []string{"progress/00000010.jsonl"}, names(got))
}

func TestDeleteMany(t *testing.T) {
	st, _ := newStore(t, Config{})
	ctx := context.Background()
	for _, k := range []string{"a", "b/c", "d"} {
		_, err := st.Put(ctx, k, bytes.NewReader([]byte(k)))
		must.NoError(t, err)
	}
	must.NoError(t, st.DeleteMany(ctx, []string{"a", "b/c", "never-there"}))
	got, err := st.List(ctx, ListOptions{})
	must.NoError(t, err)
	must.SliceLen(t, 1, got)
	must.EqOp(t, "d", got[0].Key)
	must.NoError(t, st.DeleteMany(ctx, nil))
}

func TestPutIfAbsent(t *testing.T) {
	st, srv := newStore(t, Config{PartSize: MinPartSize})
	ctx := context.Background()
	supported, err := st.ProbeConditionalWrite(ctx, "probe")
	must.NoError(t, err)
	must.EqOp(t, srv.ConditionalWrites, supported)
	if !supported {
		t.Skip("server ignores If-None-Match; nothing to refuse")
	}
	for _, size := range []int{10, MinPartSize + 10} { // single and multipart
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			key := fmt.Sprintf("manifest-%d.json", size)
			first, second := randomBytes(size, 1), randomBytes(size, 2)
			_, err := st.PutIfAbsent(ctx, key, bytes.NewReader(first))
			must.NoError(t, err)
			_, err = st.PutIfAbsent(ctx, key, bytes.NewReader(second))
			must.ErrorIs(t, err, ErrExists)
			must.ErrorContains(t, err, key)
			rc, _, err := st.Get(ctx, key)
			must.NoError(t, err)
			got, _ := io.ReadAll(rc)
			rc.Close()
			must.True(t, bytes.Equal(first, got), must.Sprint("the first write must survive"))
			// The refused multipart upload was aborted, not left behind.
			ups, err := st.ListMultipartUploads(ctx, "")
			must.NoError(t, err)
			must.SliceEmpty(t, ups)
		})
	}
}

// errReader fails after n bytes, as a crashed writer's body would.
type errReader struct{ n int }

func (r *errReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("disk on fire")
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

func TestFailedPutAborts(t *testing.T) {
	st, _ := newStore(t, Config{PartSize: MinPartSize})
	ctx := context.Background()
	_, err := st.Put(ctx, "big", &errReader{n: 3 * MinPartSize})
	must.ErrorContains(t, err, "disk on fire")
	must.ErrorContains(t, err, "big")
	ups, err := st.ListMultipartUploads(ctx, "")
	must.NoError(t, err)
	must.SliceEmpty(t, ups)
	_, err = st.Head(ctx, "big")
	must.ErrorIs(t, err, ErrNotFound)
}

func TestOrphanUploadAborted(t *testing.T) {
	st, srv := newStore(t, Config{ListPageSize: 1})
	ctx := context.Background()
	c := srv.Client(t)
	// A writer that died mid-upload: parts sent, never completed.
	var ids []string
	for _, k := range []string{"ckpt/1/rank0.bin", "ckpt/1/rank1.bin"} {
		created, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
			Bucket: &srv.Bucket, Key: aws.String("runs/r1/" + k)})
		must.NoError(t, err)
		_, err = c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &srv.Bucket, Key: aws.String("runs/r1/" + k),
			UploadId: created.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader(randomBytes(1000, 3))})
		must.NoError(t, err)
		ids = append(ids, *created.UploadId)
	}
	ups, err := st.ListMultipartUploads(ctx, "ckpt/")
	must.NoError(t, err)
	must.SliceLen(t, 2, ups) // over two pages of one
	for i, u := range ups {
		must.EqOp(t, fmt.Sprintf("ckpt/1/rank%d.bin", i), u.Key)
		must.EqOp(t, ids[i], u.ID)
		must.NoError(t, st.AbortMultipartUpload(ctx, u.Key, u.ID))
	}
	ups, err = st.ListMultipartUploads(ctx, "")
	must.NoError(t, err)
	must.SliceEmpty(t, ups)
	err = st.AbortMultipartUpload(ctx, "ckpt/1/rank0.bin", ids[0])
	must.ErrorIs(t, err, ErrNotFound)
}

func TestPutCancelled(t *testing.T) {
	st, _ := newStore(t, Config{PartSize: MinPartSize})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := st.Put(ctx, "k", bytes.NewReader(randomBytes(2*MinPartSize, 4)))
	must.ErrorIs(t, err, context.Canceled)
	_, err = st.Put(ctx, "k", bytes.NewReader(nil))
	must.ErrorIs(t, err, context.Canceled)
}

// TestPutHashesEachByteOnce: over plain HTTP a multipart Put hashes the
// body once, for the digest it returns. Its parts go as UNSIGNED-PAYLOAD
// (their CRC32 guards them), and the SDK is told so before its checksum
// middleware runs, which would otherwise compute each part's SHA-256 for
// a payload hash nothing uses. A single PutObject is signed with the
// digest Put computed. What each request's payload hash is once the
// checksum middleware has run shows it: a hash it computed would be
// there.
func TestPutHashesEachByteOnce(t *testing.T) {
	srv := s3test.Start(t)
	var (
		mu   sync.Mutex
		seen = map[string][]string{} // operation: payload hashes after the checksum
	)
	const checksum = "AWSChecksum:ComputeInputPayloadChecksum"
	probe := func(st *middleware.Stack) error {
		if _, ok := st.Finalize.Get(checksum); !ok {
			return nil // an operation without a body
		}
		return st.Finalize.Insert(middleware.FinalizeMiddlewareFunc("payloadHashProbe",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
				middleware.FinalizeOutput, middleware.Metadata, error) {
				mu.Lock()
				op := middleware.GetOperationName(ctx)
				seen[op] = append(seen[op], v4.GetPayloadHash(ctx))
				if req, ok := in.Request.(*smithyhttp.Request); ok && req.Header.Get("X-Amz-Checksum-Crc32") == "" {
					seen[op] = append(seen[op], "no CRC32")
				}
				mu.Unlock()
				return next.HandleFinalize(ctx, in)
			}), checksum, middleware.After)
	}
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String(srv.Endpoint), Region: srv.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
		APIOptions:  []func(*middleware.Stack) error{probe},
		// As Open's clients do (the SDK's default): a CRC32 on every body.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
	})
	st, err := New(client, Location{Bucket: srv.Bucket}, Config{PartSize: MinPartSize})
	must.NoError(t, err)
	ctx := context.Background()
	big := randomBytes(2*MinPartSize+1, 7)
	res, err := st.Put(ctx, "big", bytes.NewReader(big))
	must.NoError(t, err)
	must.EqOp(t, 3, res.Parts)
	must.EqOp(t, sha256.Sum256(big), res.SHA256)
	small := []byte("small")
	_, err = st.Put(ctx, "small", bytes.NewReader(small))
	must.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	must.Eq(t, []string{"UNSIGNED-PAYLOAD", "UNSIGNED-PAYLOAD", "UNSIGNED-PAYLOAD"}, seen["UploadPart"])
	sum := sha256.Sum256(small)
	must.Eq(t, []string{hex.EncodeToString(sum[:])}, seen["PutObject"])
}

// A Body, hashed by its caller, is written as Put writes, with or
// without If-None-Match; the server refuses one whose hash is not its
// own, and a body bigger than one part is refused.
func TestBody(t *testing.T) {
	st, srv := newStore(t, Config{PartSize: MinPartSize})
	ctx := context.Background()
	data := randomBytes(1<<20, 3)
	b, err := st.BodyOf(data, sha256.Sum256(data))
	must.NoError(t, err)
	res, err := st.PutBodyIfAbsent(ctx, "body", b, nil)
	must.NoError(t, err)
	must.EqOp(t, sha256.Sum256(data), res.SHA256)
	must.EqOp(t, int64(len(data)), res.Size)
	if srv.ConditionalWrites {
		_, err = st.PutBodyIfAbsent(ctx, "body", b, nil)
		must.ErrorIs(t, err, ErrExists)
	}
	_, err = st.PutBody(ctx, "again", b, nil) // a Body can be written more than once
	must.NoError(t, err)
	for _, key := range []string{"body", "again"} {
		rc, _, err := st.Get(ctx, key)
		must.NoError(t, err)
		got, _ := io.ReadAll(rc)
		rc.Close()
		must.True(t, bytes.Equal(data, got), must.Sprint(key))
	}

	wrong, err := st.BodyOf(data, sha256.Sum256(data[1:]))
	must.NoError(t, err)
	_, err = st.PutBody(ctx, "wrong", wrong, nil)
	must.Error(t, err)
	_, err = st.Head(ctx, "wrong")
	must.ErrorIs(t, err, ErrNotFound)

	big := randomBytes(MinPartSize+1, 4)
	_, err = st.BodyOf(big, sha256.Sum256(big))
	must.ErrorContains(t, err, "bigger than one part")
	other := storeOn(t, srv, Config{})
	b2, err := other.BodyOf([]byte("x"), sha256.Sum256([]byte("x")))
	must.NoError(t, err)
	_, err = st.PutBody(ctx, "other", b2, nil)
	must.ErrorContains(t, err, "another store")
}

// A fenced Body goes up but for its last byte, which waits for the
// fence: until it answers the object does not exist, and when it fails
// the object never does, and the write is not retried.
func TestBodyFence(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	proxy := newCountingProxy(t, srv.Endpoint)
	client := s3.New(srv.Client(t).Options(), func(o *s3.Options) { o.BaseEndpoint = aws.String(proxy.url) })
	st, err := New(client, Location{Bucket: srv.Bucket}, Config{})
	must.NoError(t, err)
	data := randomBytes(1<<20, 5)
	b, err := st.BodyOf(data, sha256.Sum256(data))
	must.NoError(t, err)

	t.Run("passes", func(t *testing.T) {
		sent := proxy.sent.Load()
		var asked atomic.Int32
		res, err := st.PutBodyIfAbsent(ctx, "fenced", b, func() error {
			asked.Add(1)
			// The body is on its way (its checksum was not computed by
			// reading it first), and the object is not there yet.
			deadline := time.Now().Add(10 * time.Second)
			for proxy.sent.Load()-sent < int64(len(data)-1) {
				if time.Now().After(deadline) {
					return errors.New("the body was not sent before the fence")
				}
				time.Sleep(time.Millisecond)
			}
			if _, err := st.Head(ctx, "fenced"); !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("object visible before its fence: %v", err)
			}
			return nil
		})
		must.NoError(t, err)
		must.EqOp(t, int32(1), asked.Load())
		must.EqOp(t, sha256.Sum256(data), res.SHA256)
		rc, _, err := st.Get(ctx, "fenced")
		must.NoError(t, err)
		got, _ := io.ReadAll(rc)
		rc.Close()
		must.True(t, bytes.Equal(data, got))
	})
	t.Run("fails", func(t *testing.T) {
		fenced := errors.New("lease taken")
		var asked atomic.Int32
		_, err := st.PutBody(ctx, "refused", b, func() error { asked.Add(1); return fenced })
		must.ErrorIs(t, err, fenced)
		must.EqOp(t, int32(1), asked.Load())
		_, err = st.Head(ctx, "refused")
		must.ErrorIs(t, err, ErrNotFound)
	})
}

// countingProxy forwards TCP connections to an S3 server, counting the
// bytes sent to it.
type countingProxy struct {
	url  string
	sent atomic.Int64
}

func newCountingProxy(t *testing.T, endpoint string) *countingProxy {
	t.Helper()
	u, err := url.Parse(endpoint)
	must.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	p := &countingProxy{url: "http://" + ln.Addr().String()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", u.Host)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Go(func() {
				io.Copy(countingWriter{out, &p.sent}, in)
				out.Close()
			})
			wg.Go(func() { io.Copy(in, out); in.Close() })
		}
	})
	return p
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// resetPuts is a transport that loses the answer to every conditional
// PutObject: with server true the request reaches the server first (it
// refuses or writes, as it would), otherwise it never leaves. The caller
// sees a reset connection either way, as with a server that answers 412
// from the headers and closes the connection while the body is still
// being sent.
type resetPuts struct {
	server bool
	tries  atomic.Int32
}

func (r *resetPuts) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || req.Header.Get("If-None-Match") == "" {
		return http.DefaultTransport.RoundTrip(req)
	}
	r.tries.Add(1)
	if r.server {
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return nil, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
}

// A conditional write that fails with no answer is ErrExists when the key
// holds an object afterwards, and keeps its own error when it does not.
func TestPutIfAbsentWithoutAnswer(t *testing.T) {
	srv := s3test.Start(t)
	if !srv.ConditionalWrites {
		t.Skip("the server does not implement conditional writes")
	}
	ctx := context.Background()
	plain := storeOn(t, srv, Config{PartSize: MinPartSize})
	data := randomBytes(1<<20, 5)
	_, err := plain.Put(ctx, "there", bytes.NewReader(data))
	must.NoError(t, err)

	open := func(server bool) (*Store, *resetPuts) {
		rt := &resetPuts{server: server}
		client := s3.New(s3.Options{
			BaseEndpoint: aws.String(srv.Endpoint), Region: srv.Region, UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
			HTTPClient:  &http.Client{Transport: rt},
		})
		st, err := New(client, Location{Bucket: srv.Bucket, Prefix: "runs/r1"}, Config{PartSize: MinPartSize})
		must.NoError(t, err)
		return st, rt
	}

	// The server refused the write (412), and the answer was lost.
	st, rt := open(true)
	b, err := st.BodyOf(data, sha256.Sum256(data))
	must.NoError(t, err)
	_, err = st.PutBodyIfAbsent(ctx, "there", b, nil)
	must.ErrorIs(t, err, ErrExists)
	must.ErrorContains(t, err, "connection reset")
	must.Greater(t, 1, rt.tries.Load()) // the SDK retried before the HEAD
	_, err = st.PutIfAbsent(ctx, "there", bytes.NewReader([]byte("small")))
	must.ErrorIs(t, err, ErrExists)

	// Nothing reached the server: the key is still free, and the write
	// fails with its own error.
	st, _ = open(false)
	b, err = st.BodyOf(data, sha256.Sum256(data))
	must.NoError(t, err)
	_, err = st.PutBodyIfAbsent(ctx, "free", b, nil)
	must.Error(t, err)
	must.False(t, errors.Is(err, ErrExists), must.Sprint(err))
	must.ErrorContains(t, err, "connection reset")
	_, err = plain.Head(ctx, "free")
	must.ErrorIs(t, err, ErrNotFound)

	// An unconditional write asks nothing after a lost answer.
	_, err = st.PutBody(ctx, "there", b, nil)
	must.NoError(t, err)
}
