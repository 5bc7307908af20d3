package objstore

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
)

// resumeSize is big enough that most of the body is still on the server's
// side of the connection when it breaks, whatever the socket buffers hold.
const resumeSize = 48 << 20

// openResuming opens a store that reaches srv through endpoint, retrying
// for 20s and counting the broken bodies it reads on from.
func openResuming(t *testing.T, srv *s3test.Server, endpoint string, broken *atomic.Int32) *Store {
	st, err := Open(context.Background(), "s3://"+srv.Bucket+"/resume", Config{Endpoint: endpoint, Region: srv.Region,
		PathStyle: true, RetryFor: 20 * time.Second, StallTimeout: 400 * time.Millisecond,
		OnRetry: func(_ int, err error, _ time.Duration) {
			if strings.Contains(err.Error(), "broke at byte") {
				broken.Add(1)
			}
		}})
	must.NoError(t, err)
	return st
}

// A download whose connection breaks part-way reads on from where it
// broke, once the server is back: a restart of the server (the
// connection reset), and a server gone silent (the connection stalled).
// The bytes read are the object's.
func TestGetReadsOnThroughABrokenBody(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeys(t)
	relay := s3test.NewRelay(t, srv.Endpoint)
	body := randomBytes(resumeSize, 9)
	var broken atomic.Int32
	direct := openResuming(t, srv, srv.Endpoint, &broken)
	_, err := direct.Put(context.Background(), "big", bytes.NewReader(body))
	must.NoError(t, err)

	relayed := openResuming(t, srv, relay.Endpoint, &broken)
	for _, tc := range []struct {
		name string
		st   *Store
		get  func(*Store) func(context.Context, string) (io.ReadCloser, ObjectInfo, error)
		cut  func()
	}{
		{"the server restarts", direct, getWhole, func() { srv.Outage(t, time.Second) }},
		{"the server goes silent", relayed, getWhole, func() {
			relay.Cut()
			time.AfterFunc(time.Second, relay.Mend)
		}},
		// Several ranges on their way break at once.
		{"the server restarts under ranges", direct, getRanged, func() { srv.Outage(t, time.Second) }},
		{"the server goes silent under ranges", relayed, getRanged, func() {
			relay.Cut()
			time.AfterFunc(time.Second, relay.Mend)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken.Store(0)
			rc, info, err := tc.get(tc.st)(context.Background(), "big")
			must.NoError(t, err)
			defer rc.Close()
			must.EqOp(t, int64(resumeSize), info.Size)
			head := make([]byte, 1<<20)
			_, err = io.ReadFull(rc, head)
			must.NoError(t, err)
			tc.cut()
			rest, err := io.ReadAll(rc)
			must.NoError(t, err)
			must.True(t, bytes.Equal(body, append(head, rest...)), must.Sprint("the bytes read are the object's"))
			must.Positive(t, broken.Load(), must.Sprint("the body broke and was read on"))
		})
	}

	// A command's store (no RetryFor) reads on too, for DefaultResumeFor,
	// through the server's restart and its refusals meanwhile: here each
	// request is tried once, so the body's own rounds ride it out.
	t.Run("without RetryFor", func(t *testing.T) {
		st, err := Open(context.Background(), "s3://"+srv.Bucket+"/resume", Config{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true},
			func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
		must.NoError(t, err)
		rc, _, err := st.Get(context.Background(), "big")
		must.NoError(t, err)
		defer rc.Close()
		head := make([]byte, 1<<20)
		_, err = io.ReadFull(rc, head)
		must.NoError(t, err)
		back := make(chan struct{})
		go func() { defer close(back); srv.Outage(t, 2*time.Second) }()
		time.Sleep(300 * time.Millisecond) // the server is down: reading on is refused
		rest, err := io.ReadAll(rc)
		<-back
		must.NoError(t, err)
		must.True(t, bytes.Equal(body, append(head, rest...)))
	})
}

func getWhole(st *Store) func(context.Context, string) (io.ReadCloser, ObjectInfo, error) {
	return st.Get
}

func getRanged(st *Store) func(context.Context, string) (io.ReadCloser, ObjectInfo, error) {
	return st.GetRanged
}

// An object replaced while its download was broken is not read on: the
// rest is asked for If-Match the ETag first read, and the read fails
// rather than splice two objects.
func TestGetDoesNotSpliceAReplacedObject(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeys(t)
	relay := s3test.NewRelay(t, srv.Endpoint)
	var broken atomic.Int32
	direct := openResuming(t, srv, srv.Endpoint, &broken)
	_, err := direct.Put(context.Background(), "big", bytes.NewReader(randomBytes(resumeSize, 1)))
	must.NoError(t, err)
	st := openResuming(t, srv, relay.Endpoint, &broken)
	rc, _, err := st.Get(context.Background(), "big")
	must.NoError(t, err)
	defer rc.Close()
	_, err = io.ReadFull(rc, make([]byte, 1<<20))
	must.NoError(t, err)
	relay.Cut()
	_, err = direct.Put(context.Background(), "big", bytes.NewReader(randomBytes(resumeSize, 2)))
	must.NoError(t, err)
	relay.Mend()
	_, err = io.ReadAll(rc)
	must.ErrorContains(t, err, "reading on from byte")
	must.ErrorContains(t, err, "PreconditionFailed")
}
