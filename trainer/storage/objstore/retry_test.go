package objstore

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
)

// RetryFor's attempts are the fewest whose nominal waits cover it.
func TestAttemptsFor(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 200 * time.Millisecond, time.Second, 3 * time.Second, time.Minute, 10 * time.Minute} {
		n := attemptsFor(d)
		var waited time.Duration
		for a := 1; a < n-1; a++ {
			waited += nominalWait(a)
		}
		must.Less(t, d, waited, must.Sprintf("%v: one attempt fewer would wait less", d))
		must.GreaterEq(t, d, waited+nominalWait(n-1), must.Sprintf("%v: %d attempts wait long enough", d, n))
	}
	must.EqOp(t, 34, attemptsFor(time.Minute)) // 0.2+0.4+0.8+1.6 s, then 29 waits of 2 s
}

// A store opened with RetryFor rides out a restart of its server: a
// multipart Put made while the server is down completes once it is back,
// and OnRetry hears of the retries. With the SDK's standard retries the
// same Put, made at the same time, fails.
func TestRetryForRidesOutAnOutage(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeys(t)
	ctx := context.Background()
	var retries atomic.Int32
	open := func(retryFor time.Duration) *Store {
		st, err := Open(ctx, "s3://"+srv.Bucket+"/runs", Config{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
			PartSize: MinPartSize, RetryFor: retryFor, OnRetry: func(int, error, time.Duration) { retries.Add(1) }})
		must.NoError(t, err)
		return st
	}
	patient, plain := open(20*time.Second), open(0)
	for _, st := range []*Store{patient, plain} { // connections open before the outage, as a run's are
		_, err := st.Put(ctx, "before", bytes.NewReader([]byte("x")))
		must.NoError(t, err)
	}

	back := make(chan struct{})
	go func() { srv.Outage(t, 3*time.Second); close(back) }()
	time.Sleep(300 * time.Millisecond)
	_, err := plain.Put(ctx, "plain", bytes.NewReader([]byte("y")))
	must.Error(t, err, must.Sprint("the standard retries give up within the outage"))
	must.EqOp(t, int32(0), retries.Load(), must.Sprint("OnRetry goes only with RetryFor"))
	body := randomBytes(2*MinPartSize+1, 7)
	began := time.Now()
	_, err = patient.Put(ctx, "during", bytes.NewReader(body))
	must.NoError(t, err)
	<-back
	must.Greater(t, 2*time.Second, time.Since(began), must.Sprint("it waited for the server"))
	must.Positive(t, retries.Load())
	mustHold(t, patient, "during", body)
}

// mustHold checks that st's object at key holds want.
func mustHold(t *testing.T, st *Store, key string, want []byte) {
	t.Helper()
	rc, _, err := st.Get(context.Background(), key)
	must.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	must.NoError(t, err)
	must.True(t, bytes.Equal(want, got), must.Sprintf("%s holds %d bytes, not the %d put", key, len(got), len(want)))
}

// completeLosingClient stands between a store and its server for the
// completions of multipart uploads. The first completion reaches the
// server (or, with dropRequest, does not) and its answer is lost: the
// store sees a reset connection, and the SDK sends it again. The retry
// reaches the server, or, with noSuchUpload, is answered NoSuchUpload, as
// servers that forget a completed upload answer (MinIO has; versitygw
// answers with the completion's result).
type completeLosingClient struct {
	next                      s3.HTTPClient
	dropRequest, noSuchUpload bool
	calls                     atomic.Int32
}

func (c *completeLosingClient) Do(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !req.URL.Query().Has("uploadId") {
		return c.next.Do(req)
	}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	switch n := c.calls.Add(1); {
	case n == 1 && c.dropRequest:
		return nil, reset
	case n == 1:
		resp, err := c.next.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return nil, reset
	case c.noSuchUpload:
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchUpload</Code><Message>The specified upload does not exist.</Message></Error>`
		return &http.Response{StatusCode: http.StatusNotFound, Status: "404 Not Found", Request: req,
			Header: http.Header{"Content-Type": {"application/xml"}}, ContentLength: int64(len(body)),
			Body: io.NopCloser(strings.NewReader(body))}, nil
	}
	return c.next.Do(req)
}

// A multipart upload whose completion the server took, but whose answer
// was lost, is sent again by the SDK. Whatever the server answers the
// retry, the Put succeeds: with the completion's result (versitygw), or
// with NoSuchUpload, when the object made of exactly these parts is found
// at the key. NoSuchUpload for a completion that never reached the server
// fails the Put: no object of these parts is there.
func TestLostAnswerToCompletion(t *testing.T) {
	srv := s3test.Start(t)
	body := randomBytes(2*MinPartSize+3, 11)
	for _, tc := range []struct {
		name                      string
		dropRequest, noSuchUpload bool
		ok                        bool
	}{
		{"the server answers the retry", false, false, true},
		{"the server answers NoSuchUpload", false, true, true},
		{"the completion never reached it", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			losing := &completeLosingClient{dropRequest: tc.dropRequest, noSuchUpload: tc.noSuchUpload}
			client := s3.New(srv.Client(t).Options(), func(o *s3.Options) {
				losing.next = o.HTTPClient
				o.HTTPClient = losing
			})
			st, err := New(client, Location{Bucket: srv.Bucket, Prefix: strings.ReplaceAll(tc.name, " ", "-")}, Config{PartSize: MinPartSize})
			must.NoError(t, err)
			res, err := st.Put(context.Background(), "big.bin", bytes.NewReader(body))
			must.EqOp(t, int32(2), losing.calls.Load(), must.Sprint("the completion was sent again"))
			if !tc.ok {
				must.ErrorContains(t, err, "NoSuchUpload")
				_, herr := st.Head(context.Background(), "big.bin")
				must.ErrorIs(t, herr, ErrNotFound)
				return
			}
			must.NoError(t, err)
			must.EqOp(t, 3, res.Parts)
			info, err := st.Head(context.Background(), "big.bin")
			must.NoError(t, err)
			must.EqOp(t, info.ETag, res.ETag)
			must.EqOp(t, int64(len(body)), info.Size)
		})
	}
}
