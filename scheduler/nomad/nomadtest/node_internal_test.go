package nomadtest

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestRegisteredJobIsPlacedWhenClientLeaves: a client that goes away
// while its registration is being handled (a tuner killed mid-request)
// still leaves a job that is placed and run, as on a real agent; the fake
// once left such a job registered with no allocation, forever.
func TestRegisteredJobIsPlacedWhenClientLeaves(t *testing.T) {
	srv := New(t)
	ran := make(chan struct{}, 1)
	node := NewNode(t, srv, func(ctx context.Context, job *api.Job) error {
		ran <- struct{}{}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	srv.mu.Lock()
	srv.onRegister = func() {
		cancel()                          // the client leaves
		time.Sleep(50 * time.Millisecond) // and the node sees it go
	}
	srv.mu.Unlock()
	cfg := api.DefaultConfig()
	cfg.Address = node.URL
	c, err := api.NewClient(cfg)
	must.NoError(t, err)
	job := api.NewBatchJob("left", "left", "", 50)
	job.TaskGroups = []*api.TaskGroup{api.NewTaskGroup("worker", 1)}
	_, _, err = c.Jobs().Register(job, (&api.WriteOptions{}).WithContext(ctx))
	must.Error(t, err)
	must.Eq(t, []string{"left"}, srv.Registered())
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the registered job was never placed")
	}
}
