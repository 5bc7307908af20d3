package storage

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// answerLosingClient hands the first PUT or DELETE of each key ending in one of
// suffixes to the server, then drops the server's answer and reports a
// reset connection, as a server restarted between taking a write and
// answering it does; the SDK then sends the request again.
type answerLosingClient struct {
	next     s3.HTTPClient
	suffixes []string
	mu       sync.Mutex
	lost     map[string]bool // keys whose answer was dropped
}

func (c *answerLosingClient) Do(req *http.Request) (*http.Response, error) {
	resp, err := c.next.Do(req)
	if err != nil || req.Method != http.MethodPut && req.Method != http.MethodDelete {
		return resp, err
	}
	for _, suf := range c.suffixes {
		if !strings.HasSuffix(req.URL.Path, suf) {
			continue
		}
		c.mu.Lock()
		first := !c.lost[req.URL.Path]
		c.lost[req.URL.Path] = true
		c.mu.Unlock()
		if first && resp.StatusCode/100 == 2 {
			resp.Body.Close()
			return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		}
	}
	return resp, nil
}

// A conditional write the server took, whose answer was lost, comes back
// from the SDK's retry as refused: the key exists. The writer knows its
// own: the lease it took is its, and the checkpoint whose manifest it
// wrote is committed, not taken by another writer. (Before, opening the
// run waited out the lease's time to live and took its own lease over as
// an expired one, and the commit failed.)
func TestLostAnswerToOwnWrite(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	losing := &answerLosingClient{suffixes: []string{"/" + objLeaseKey, "/" + ManifestFile}, lost: map[string]bool{}}
	client := s3.New(srv.Client(t).Options(), func(o *s3.Options) {
		losing.next = o.HTTPClient
		o.HTTPClient = losing
	})
	st, err := objstore.New(client, objstore.Location{Bucket: srv.Bucket, Prefix: "lost"}, objstore.Config{})
	must.NoError(t, err)

	began := time.Now()
	w, err := OpenObject(ctx, st, "run", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	must.Less(t, 5*time.Second, time.Since(began), must.Sprint("its own lease is not waited out"))
	s, err := w.Stage()
	must.NoError(t, err)
	writeTree(t, s.Dir(), map[string]string{"model.bin": "weights"})
	name, err := w.Commit(s, Record{Step: 1})
	must.NoError(t, err)
	must.NoError(t, w.flushed())
	must.MapLen(t, 2, losing.lost, must.Sprint("both answers were dropped: ", losing.lost))
	losing.mu.Lock()
	losing.lost = map[string]bool{} // the lease's release too
	losing.mu.Unlock()
	must.NoError(t, w.Close(), must.Sprint("a lease found gone by the release's retry is released"))
	must.MapLen(t, 1, losing.lost)

	ro, err := OpenObjectReadOnly(ctx, st, "run", Policy{}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	defer ro.Close()
	res, err := ro.LatestIntact()
	must.NoError(t, err)
	must.EqOp(t, name, res.Name)
	must.Eq(t, map[string]string{"model.bin": "weights"}, readTree(t, res.Path))
}
