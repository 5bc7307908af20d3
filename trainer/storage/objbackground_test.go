package storage

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// flushed waits for the segments being written in the background: a
// read-only reader sees every record written so far once it returns.
func (r *ObjectRun) flushed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waitSegments()
}

// refusingClient fails the PUTs of progress segments while refuse is set,
// as a server that stops taking writes would.
type refusingClient struct {
	next   s3.HTTPClient
	refuse *atomic.Bool
}

func (c refusingClient) Do(req *http.Request) (*http.Response, error) {
	if c.refuse.Load() && req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/"+objProgressDir) {
		return nil, errors.New("connection refused (test)")
	}
	return c.next.Do(req)
}

// A checkpoint's record is written after Commit returns. Its failure
// fails the run's later writes and Close, but never takes the checkpoint
// back: the manifest holds the record, and the next writer rebuilds it.
func TestBackgroundRecordFailureKeepsCheckpoint(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	var refuse atomic.Bool
	client := srv.Client(t)
	client = s3.New(client.Options(), func(o *s3.Options) {
		o.HTTPClient = refusingClient{next: o.HTTPClient, refuse: &refuse}
		o.RetryMaxAttempts = 1
	})
	loc := objstore.Location{Bucket: srv.Bucket, Prefix: "bgrec"}
	st, err := objstore.New(client, loc, objstore.Config{})
	must.NoError(t, err)

	w, err := OpenObject(ctx, st, "run", Policy{NumToKeep: 1}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	commit := func(step int64) (string, error) {
		s, err := w.Stage()
		must.NoError(t, err)
		writeTree(t, s.Dir(), map[string]string{"model.bin": strings.Repeat("w", int(step)+1)})
		return w.Commit(s, Record{Step: step})
	}
	first, err := commit(1)
	must.NoError(t, err)
	must.NoError(t, w.flushed())

	refuse.Store(true)
	second, err := commit(2)
	must.NoError(t, err, must.Sprint("the checkpoint is committed once its manifest is written"))
	must.ErrorContains(t, w.flushed(), "recording checkpoint "+second)
	must.ErrorContains(t, w.Append(Record{Step: 3}), "recording checkpoint "+second)
	must.ErrorContains(t, w.Close(), "recording checkpoint "+second)
	refuse.Store(false)

	good, err := objstore.New(srv.Client(t), loc, objstore.Config{})
	must.NoError(t, err)
	next, err := OpenObject(ctx, good, "run", Policy{NumToKeep: 1}, WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	defer next.Close()
	must.Eq(t, []string{second}, next.Recovery().Rebuilt)
	must.Eq(t, []string{first}, next.Recovery().Pruned, must.Sprint("retention waited for the newer record"))
	res, err := next.LatestIntact()
	must.NoError(t, err)
	must.EqOp(t, second, res.Name)
	must.EqOp(t, 2, res.Record.Step)
}
