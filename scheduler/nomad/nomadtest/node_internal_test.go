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
	c, job := clientAndJob(t, node.URL, "left", 1)
	_, _, err := c.Jobs().Register(job, (&api.WriteOptions{}).WithContext(ctx))
	must.Error(t, err)
	must.Eq(t, []string{"left"}, srv.Registered())
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the registered job was never placed")
	}
}

// The fake reports a job's status as a real agent does (Nomad's
// getJobStatus): pending once registered, and while a blocked gang waits
// with no allocation; running while an allocation is not terminal; dead
// once every allocation and evaluation is, or once stopped; the same in
// the job list.
func TestJobStatus(t *testing.T) {
	srv := New(t)
	c, job := clientAndJob(t, srv.URL, "j", 2)
	_, _, err := c.Jobs().Register(job, nil)
	must.NoError(t, err)
	status := func() string {
		t.Helper()
		info, _, err := c.Jobs().Info("j", nil)
		must.NoError(t, err)
		list, _, err := c.Jobs().List(nil)
		must.NoError(t, err)
		must.Len(t, 1, list)
		must.EqOp(t, *info.Status, list[0].Status)
		return *info.Status
	}
	must.EqOp(t, "pending", status())

	blocked := Step{Evaluations: []*api.Evaluation{{ID: "e1", JobID: "j", Status: "blocked"}}}
	srv.Script("j", []Step{blocked,
		Allocations("j", 2, 2, api.AllocClientStatusRunning, api.AllocDesiredStatusRun),
		Allocations("j", 2, 2, api.AllocClientStatusComplete, api.AllocDesiredStatusRun)})
	must.EqOp(t, "pending", status())
	srv.Seek("j", 1)
	must.EqOp(t, "running", status())
	srv.Seek("j", 2)
	must.EqOp(t, "dead", status())

	srv.Seek("j", 1)
	_, _, err = c.Jobs().Deregister("j", false, nil)
	must.NoError(t, err)
	must.EqOp(t, "dead", status())
}

// clientAndJob returns a real Nomad API client of the agent at addr and a
// batch job id of one group "worker" with count workers.
func clientAndJob(t *testing.T, addr, id string, count int) (*api.Client, *api.Job) {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = addr
	c, err := api.NewClient(cfg)
	must.NoError(t, err)
	job := api.NewBatchJob(id, id, "", 50)
	job.TaskGroups = []*api.TaskGroup{api.NewTaskGroup("worker", count)}
	return c, job
}
