package objstore

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// A worker's default stall timeout is this package's: workerenv, a leaf
// the spec compiler imports, keeps its own copy rather than import the
// S3 client, and the two must not drift apart.
func TestWorkersDefaultStallTimeoutIsTheStores(t *testing.T) {
	must.EqOp(t, DefaultStallTimeout, workerenv.DefaultStorageStallTimeout)
}

// A server lost behind a silent network (the relay cut: nothing refused,
// nothing answered) holds a request without StallTimeout for as long as
// the connection lives. With it, the stalled attempts fail and are
// retried, and a Put made during the cut completes once traffic reaches
// a working server again; the one without is still waiting.
func TestStallTimeoutGetsPastASilentServer(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeys(t)
	relay := s3test.NewRelay(t, srv.Endpoint)
	ctx := context.Background()
	var stalls atomic.Int32
	open := func(stall time.Duration) *Store {
		st, err := Open(ctx, "s3://"+srv.Bucket+"/runs", Config{Endpoint: relay.Endpoint, Region: srv.Region, PathStyle: true,
			PartSize: MinPartSize, RetryFor: 20 * time.Second, StallTimeout: stall,
			OnRetry: func(_ int, err error, _ time.Duration) {
				if errors.Is(err, ErrStalled) {
					stalls.Add(1)
				}
			}})
		must.NoError(t, err)
		return st
	}
	patient, unlimited := open(400*time.Millisecond), open(-1)
	for _, st := range []*Store{patient, unlimited} { // pooled connections, as a run's are
		_, err := st.Put(ctx, "before", bytes.NewReader([]byte("x")))
		must.NoError(t, err)
	}

	relay.Cut()
	var wg sync.WaitGroup
	var unlimitedErr error
	wg.Go(func() {
		c, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		_, unlimitedErr = unlimited.Put(c, "unlimited", bytes.NewReader([]byte("y")))
	})
	mended := time.AfterFunc(1500*time.Millisecond, relay.Mend)
	defer mended.Stop()
	body := randomBytes(2*MinPartSize+1, 5)
	began := time.Now()
	_, err := patient.Put(ctx, "during", bytes.NewReader(body))
	must.NoError(t, err)
	took := time.Since(began)
	must.Greater(t, 1500*time.Millisecond, took, must.Sprint("it waited for the relay to mend"))
	must.Positive(t, stalls.Load(), must.Sprint("stalled attempts were retried"))
	mustHold(t, patient, "during", body)

	wg.Wait()
	must.ErrorIs(t, unlimitedErr, context.DeadlineExceeded, must.Sprint("without a stall timeout the request waits on its dead connection"))
}

// RetryFor bounds the time spent retrying, not only the attempts: when
// each attempt waits out a stall, retries stop once RetryFor has passed,
// and the error says so and is ErrStalled. Counting attempts alone (5
// for 1.5s) would take about 5 stalls and 3s of backoff here.
func TestRetryForBoundsTimeWhenAttemptsStall(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeys(t)
	relay := s3test.NewRelay(t, srv.Endpoint)
	st, err := Open(context.Background(), "s3://"+srv.Bucket, Config{Endpoint: relay.Endpoint, Region: srv.Region, PathStyle: true,
		RetryFor: 1500 * time.Millisecond, StallTimeout: time.Second})
	must.NoError(t, err)
	relay.Cut()
	began := time.Now()
	_, err = st.Head(context.Background(), "k")
	took := time.Since(began)
	must.ErrorIs(t, err, ErrStalled)
	must.ErrorContains(t, err, "gave up retrying after")
	must.StrNotContains(t, err.Error(), "\n")
	must.Less(t, 4*time.Second, took)
	must.Greater(t, 1500*time.Millisecond, took)
}

// slowServer answers just enough of S3 for a Head and a multipart Put,
// taking delay over Heads and completions, and nothing on the wire
// meanwhile, as a server assembling a big upload may.
func slowServer(t *testing.T, delay time.Duration) *httptest.Server {
	srv := httptest.NewServer(fakeUploads(delay, delay, nil))
	t.Cleanup(srv.Close)
	return srv
}

// fakeUploads answers Heads after headDelay, the steps of a multipart
// upload, and its completion after completeDelay, with nothing on the
// wire meanwhile; seen, when set, is called with each request first.
func fakeUploads(headDelay, completeDelay time.Duration, seen func(*http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if seen != nil {
			seen(r)
		}
		q := r.URL.Query()
		_, _ = io.Copy(io.Discard, r.Body)
		switch {
		case r.Method == http.MethodHead:
			time.Sleep(headDelay)
			w.Header().Set("Content-Length", "1")
			w.Header().Set("ETag", `"e"`)
		case r.Method == http.MethodPost && q.Has("uploads"):
			fmt.Fprint(w, `<InitiateMultipartUploadResult><Bucket>bucket</Bucket><Key>k</Key><UploadId>u1</UploadId></InitiateMultipartUploadResult>`)
		case r.Method == http.MethodPut && q.Has("partNumber"):
			w.Header().Set("ETag", fmt.Sprintf(`"part%s"`, q.Get("partNumber")))
		case r.Method == http.MethodPost && q.Has("uploadId"):
			time.Sleep(completeDelay)
			fmt.Fprint(w, `<CompleteMultipartUploadResult><Bucket>bucket</Bucket><Key>k</Key><ETag>"done-2"</ETag></CompleteMultipartUploadResult>`)
		default:
			http.Error(w, "not served here", http.StatusNotImplemented)
		}
	}
}

// A request's own allowance overrides the stall timeout on whichever
// pooled connection it gets; the next request on that connection has the
// store's again.
func TestStallAllowancePerRequest(t *testing.T) {
	srv := slowServer(t, time.Second)
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	st, err := Open(context.Background(), "s3://bucket", Config{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true,
		StallTimeout: 300 * time.Millisecond})
	must.NoError(t, err)
	ctx := context.Background()
	_, err = st.Head(WithStallAllowance(ctx, 3*time.Second), "k")
	must.NoError(t, err)
	_, err = st.Head(ctx, "k")
	must.ErrorIs(t, err, ErrStalled)
	_, err = st.Head(WithStallAllowance(ctx, 3*time.Second), "k")
	must.NoError(t, err)
}

// A multipart completion may take a second more per 8 MiB than the stall
// timeout: 10 MiB, completed after a silent second, is a success under a
// 300ms stall timeout.
func TestCompletionIsAllowedTimeForItsSize(t *testing.T) {
	must.EqOp(t, 30*time.Second+32*time.Second, completeAllowance(30*time.Second, 256<<20))
	must.EqOp(t, time.Second, completeAllowance(time.Second, completeRate-1))

	srv := slowServer(t, time.Second)
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	st, err := Open(context.Background(), "s3://bucket", Config{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true,
		PartSize: MinPartSize, StallTimeout: 300 * time.Millisecond})
	must.NoError(t, err)
	res, err := st.Put(context.Background(), "k", bytes.NewReader(make([]byte, 2*MinPartSize)))
	must.NoError(t, err)
	must.EqOp(t, `"done-2"`, res.ETag)
}

// Behind TLS a server may offer HTTP/2 (MinIO does), which would carry
// every request on one connection, so that a short allowance given to
// one request (a lease's renewal) would cut another that the server
// answers after a silent while (a completion). The store speaks HTTP/1.1,
// each request on a connection of its own: the completion, silent for
// 1.5 s of its 3 s, is sent once although a Head allowed 200ms goes
// beside it. The server's certificate is trusted through AWS_CA_BUNDLE,
// which the stall client keeps.
func TestStallClientGivesEachRequestItsConnection(t *testing.T) {
	var h2, completions atomic.Int32
	completing := make(chan struct{}, 4)
	srv := httptest.NewUnstartedServer(fakeUploads(0, 1500*time.Millisecond, func(r *http.Request) {
		if r.ProtoMajor == 2 {
			h2.Add(1)
		}
		if r.Method == http.MethodPost && r.URL.Query().Has("uploadId") {
			completions.Add(1)
			completing <- struct{}{}
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	must.NoError(t, os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	isolateAWS(t)
	t.Setenv("AWS_CA_BUNDLE", bundle)
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	st, err := Open(context.Background(), "s3://bucket", Config{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true,
		PartSize: MinPartSize, StallTimeout: 2 * time.Second})
	must.NoError(t, err)

	head := make(chan error, 1)
	go func() {
		<-completing
		time.Sleep(100 * time.Millisecond)
		_, err := st.Head(WithStallAllowance(context.Background(), 200*time.Millisecond), "k")
		head <- err
	}()
	res, err := st.Put(context.Background(), "k", bytes.NewReader(make([]byte, 2*MinPartSize)))
	must.NoError(t, err)
	must.EqOp(t, `"done-2"`, res.ETag)
	must.NoError(t, <-head)
	must.EqOp(t, 1, completions.Load())
	must.EqOp(t, 0, h2.Load())
}
