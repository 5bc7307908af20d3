package objstore

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

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
	rc, _, err := patient.Get(ctx, "during")
	must.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	must.NoError(t, err)
	must.True(t, bytes.Equal(body, got))
}
