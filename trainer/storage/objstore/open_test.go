package objstore

import (
	"bytes"
	"context"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
)

// isolateAWS clears the AWS settings of the machine running the tests.
func isolateAWS(t *testing.T) string {
	dir := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return dir
}

// TestOpenCredentialChain opens stores the ways a user configures them:
// credentials and endpoint from the standard AWS sources, non-secret
// options from Config.
func TestOpenCredentialChain(t *testing.T) {
	srv := s3test.Start(t)
	url := "s3://" + srv.Bucket + "/runs"
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		cfg   Config
	}{
		{"env credentials and AWS_ENDPOINT_URL_S3", func(t *testing.T, _ string) {
			t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
			t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
			t.Setenv("AWS_REGION", srv.Region)
			t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
		}, Config{PathStyle: true}},
		{"an IP endpoint needs no path_style", func(t *testing.T, _ string) {
			t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
			t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
			t.Setenv("AWS_REGION", srv.Region)
			t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
		}, Config{}},
		{"profile in shared files, endpoint from config", func(t *testing.T, dir string) {
			creds := "[train]\naws_access_key_id = " + srv.AccessKey + "\naws_secret_access_key = " + srv.SecretKey + "\n"
			must.NoError(t, os.WriteFile(filepath.Join(dir, "credentials"), []byte(creds), 0o600))
			t.Setenv("AWS_PROFILE", "train")
		}, Config{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}},
		{"profile's own endpoint_url and region", func(t *testing.T, dir string) {
			conf := "[profile train]\nregion = " + srv.Region + "\nendpoint_url = " + srv.Endpoint +
				"\naws_access_key_id = " + srv.AccessKey + "\naws_secret_access_key = " + srv.SecretKey + "\n"
			must.NoError(t, os.WriteFile(filepath.Join(dir, "config"), []byte(conf), 0o600))
			t.Setenv("AWS_PROFILE", "train")
		}, Config{PathStyle: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup(t, isolateAWS(t))
			ctx := context.Background()
			st, err := Open(ctx, url, tc.cfg)
			must.NoError(t, err)
			_, err = st.Put(ctx, "k", bytes.NewReader([]byte("v")))
			must.NoError(t, err)
			info, err := st.Head(ctx, "k")
			must.NoError(t, err)
			must.EqOp(t, int64(1), info.Size)
		})
	}
}

func TestOpenRefusesBadInput(t *testing.T) {
	isolateAWS(t)
	_, err := Open(context.Background(), "s3://key:secret@bucket/x", Config{})
	must.ErrorContains(t, err, "credentials are not allowed")
	_, err = Open(context.Background(), "s3://bucket/x", Config{PartSize: 1 << 20})
	must.ErrorContains(t, err, "below S3's minimum")
	// No region from anywhere: said so, not as the SDK's endpoint rule
	// error at the first request.
	t.Setenv("AWS_ACCESS_KEY_ID", "id")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	_, err = Open(context.Background(), "s3://bucket/x", Config{Endpoint: "http://127.0.0.1:1"})
	must.ErrorIs(t, err, ErrNoRegion)
	must.ErrorContains(t, err, "set AWS_REGION")
	_, err = Open(context.Background(), "s3://bucket/x", Config{Environ: []string{"AWS_ACCESS_KEY_ID=id", "AWS_SECRET_ACCESS_KEY=s"}})
	must.ErrorIs(t, err, ErrNoRegion)
}

// A store opened with Config.Environ (the driver, root, reading a task's
// storage) signs with the keys in that environment and finds the region
// and endpoint there, and never with this process's: neither its
// environment nor its shared files, which here hold the server's valid
// keys while the given environment holds wrong ones, or none.
func TestOpenWithTaskEnviron(t *testing.T) {
	srv := s3test.Start(t)
	url := "s3://" + srv.Bucket + "/runs"
	dir := isolateAWS(t)
	// What root has: valid keys, in its environment and its files.
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	creds := "[default]\naws_access_key_id = " + srv.AccessKey + "\naws_secret_access_key = " + srv.SecretKey + "\n"
	must.NoError(t, os.WriteFile(filepath.Join(dir, "credentials"), []byte(creds), 0o600))
	task := func(id, secret string) []string {
		return []string{"AWS_ACCESS_KEY_ID=" + id, "AWS_SECRET_ACCESS_KEY=" + secret,
			"AWS_REGION=" + srv.Region, "AWS_ENDPOINT_URL_S3=" + srv.Endpoint, "HOME=/nonexistent"}
	}
	ctx := context.Background()

	// A CA bundle the task names is a path root would open: a FIFO here,
	// where an open would wait for a writer that never comes.
	fifo := filepath.Join(dir, "bundle")
	must.NoError(t, syscall.Mkfifo(fifo, 0o600))
	opened := make(chan error, 1)
	var st *Store
	go func() {
		var err error
		st, err = Open(ctx, url, Config{PathStyle: true, Environ: append(task(srv.AccessKey, srv.SecretKey), "AWS_CA_BUNDLE="+fifo)})
		if err == nil {
			_, err = st.Put(ctx, "k", bytes.NewReader([]byte("v")))
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		must.NoError(t, err, must.Sprint("the task's keys"))
	case <-time.After(10 * time.Second):
		t.Fatal("opening a store with the task's environment opened the CA bundle it names")
	}

	st, err := Open(ctx, url, Config{PathStyle: true, Environ: task(srv.AccessKey, "wrong")})
	must.NoError(t, err)
	_, err = st.Head(ctx, "k")
	must.Error(t, err, must.Sprint("the task's wrong keys, not root's valid ones"))

	_, err = Open(ctx, url, Config{PathStyle: true, Environ: []string{"AWS_REGION=" + srv.Region, "PATH=/bin"}})
	must.ErrorIs(t, err, ErrNoKeys, must.Sprint("a task without keys gets none of root's"))

	// The endpoint is the task's too: a wrong one there is not mended
	// from root's.
	st, err = Open(ctx, url, Config{PathStyle: true, Environ: append(task(srv.AccessKey, srv.SecretKey)[:3], "AWS_ENDPOINT_URL=http://127.0.0.1:1")})
	must.NoError(t, err)
	shortCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = st.Head(shortCtx, "k")
	must.Error(t, err)
}

// An S3 error answer reads shortly (what went wrong, its code, its HTTP
// status), not as the SDK's request and host IDs, and stays in the chain.
func TestErrorsReadShortly(t *testing.T) {
	srv := s3test.Start(t)
	isolateAWS(t)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	ctx := context.Background()
	st, err := Open(ctx, "s3://no-such-bucket/runs", Config{Endpoint: srv.Endpoint, PathStyle: true})
	must.NoError(t, err)
	_, err = st.Put(ctx, "k", bytes.NewReader([]byte("v")))
	must.ErrorContains(t, err, "(NoSuchBucket, HTTP 404)")
	must.StrNotContains(t, err.Error(), "RequestID")
	must.EqOp(t, "NoSuchBucket", errorCode(err))

	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	st, err = Open(ctx, "s3://"+srv.Bucket+"/runs", Config{Endpoint: srv.Endpoint, PathStyle: true})
	must.NoError(t, err)
	_, err = st.Put(ctx, "k", bytes.NewReader([]byte("v")))
	must.ErrorContains(t, err, "(SignatureDoesNotMatch, HTTP 403)")
	must.EqOp(t, 403, statusCode(err))

	// No keys anywhere (and no instance role): said first.
	isolateAWS(t)
	t.Setenv("AWS_REGION", srv.Region)
	st, err = Open(ctx, "s3://"+srv.Bucket+"/runs", Config{Endpoint: srv.Endpoint, PathStyle: true})
	must.NoError(t, err)
	_, err = st.Put(ctx, "k", bytes.NewReader([]byte("v")))
	must.ErrorContains(t, err, "no AWS credentials found (set AWS_ACCESS_KEY_ID")
}

// AWS S3 refuses a request for a bucket of another region, naming the
// bucket's region in a header: a Head from the wrong regional endpoint
// gets a bare 301, a Get signed for the wrong region a 400. The error
// says which region to set; an answer that names the region but is not
// such a refusal gets no hint.
func TestErrorsNameTheBucketsRegion(t *testing.T) {
	isolateAWS(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Amz-Bucket-Region", "eu-west-1")
		switch r.Method {
		case http.MethodHead:
			w.WriteHeader(http.StatusMovedPermanently)
		case http.MethodGet:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `<Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization header is malformed; the region 'us-east-1' is wrong; expecting 'eu-west-1'</Message></Error>`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `<Error><Code>NoSuchUpload</Code><Message>The specified upload does not exist.</Message></Error>`)
		}
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	st, err := Open(ctx, "s3://bucket/runs", Config{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true})
	must.NoError(t, err)
	const hint = "the bucket is in region eu-west-1 (set region in the spec's storage block, or AWS_REGION)"
	_, err = st.Head(ctx, "k")
	must.ErrorContains(t, err, "HTTP 301): "+hint)
	_, _, err = st.Get(ctx, "k")
	must.ErrorContains(t, err, "expecting 'eu-west-1' (AuthorizationHeaderMalformed, HTTP 400): "+hint)
	err = st.AbortMultipartUpload(ctx, "k", "u1")
	must.Error(t, err)
	must.StrNotContains(t, err.Error(), "the bucket is in region")
}

// Some S3-compatible servers refuse the SDK's checksum headers; the AWS
// way around that is AWS_REQUEST_CHECKSUM_CALCULATION=when_required. A
// store opened so sends no checksum where none is required (the server
// here refuses any), and since its parts then carry no CRC32, each is
// signed with its SHA-256 over plain HTTP rather than sent unsigned.
// Against a real server the same settings write and read back the bytes.
func TestPutWithChecksumsOnlyWhereRequired(t *testing.T) {
	isolateAWS(t)
	t.Setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	var (
		mu    sync.Mutex
		parts []string // for each part: "signed", or what its payload hash was
	)
	fake := httptest.NewServer(fakeUploads(0, 0, func(r *http.Request) {
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-amz-checksum-") || strings.EqualFold(k, "x-amz-sdk-checksum-algorithm") {
				t.Errorf("%s %s carries %s", r.Method, r.URL, k)
				panic(http.ErrAbortHandler) // refused: the Put fails
			}
		}
		if !r.URL.Query().Has("partNumber") {
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		sum := sha256.Sum256(body)
		got := r.Header.Get("X-Amz-Content-Sha256")
		mu.Lock()
		defer mu.Unlock()
		if got == hex.EncodeToString(sum[:]) {
			parts = append(parts, "signed")
		} else {
			parts = append(parts, got)
		}
	}))
	t.Cleanup(fake.Close)
	ctx := context.Background()
	st, err := Open(ctx, "s3://bucket", Config{Endpoint: fake.URL, Region: "us-east-1", PathStyle: true,
		PartSize: MinPartSize})
	must.NoError(t, err)
	_, err = st.Put(ctx, "k", bytes.NewReader(make([]byte, 2*MinPartSize)))
	must.NoError(t, err)
	must.Eq(t, []string{"signed", "signed"}, parts)

	srv := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	st, err = Open(ctx, "s3://"+srv.Bucket+"/runs", Config{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
		PartSize: MinPartSize})
	must.NoError(t, err)
	for _, n := range []int{100, 2*MinPartSize + 1} {
		data := make([]byte, n)
		_, _ = cryptorand.Read(data)
		_, err = st.Put(ctx, "k", bytes.NewReader(data))
		must.NoError(t, err)
		body, _, err := st.Get(ctx, "k")
		must.NoError(t, err)
		got, err := io.ReadAll(body)
		body.Close()
		must.NoError(t, err)
		must.True(t, bytes.Equal(data, got))
	}
}
