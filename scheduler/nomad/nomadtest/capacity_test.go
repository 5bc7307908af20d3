package nomadtest_test

import (
	"context"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
)

func coresJob(id string, count, cores int) *api.Job {
	job := api.NewBatchJob(id, id, "", 50)
	g := api.NewTaskGroup("worker", count)
	task := api.NewTask("worker", "train")
	task.Resources = &api.Resources{Cores: new(cores), MemoryMB: new(512)}
	g.Tasks = []*api.Task{task}
	job.TaskGroups = []*api.TaskGroup{g}
	return job
}

func client(t *testing.T, addr string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = addr
	c, err := api.NewClient(cfg)
	must.NoError(t, err)
	return c
}

func planFails(t *testing.T, c *api.Client, job *api.Job) map[string]*api.AllocationMetric {
	t.Helper()
	r, _, err := c.Jobs().Plan(job, false, nil)
	must.NoError(t, err)
	return r.FailedTGAllocs
}

// The capacity model: a plan fails with an exhausted metric while another
// job holds the cores, and fits once that job is stopped or its
// allocations ended; a job larger than the node fails the same way (as on
// Nomad); the nodes are listed with their resources.
func TestCapacityPlans(t *testing.T) {
	srv := nomadtest.New(t)
	c := client(t, srv.URL)
	must.Nil(t, planFails(t, c, coresJob("any", 8, 8)), must.Sprint("without nodes every plan fits"))
	srv.SetNodes(nomadtest.ClientNode("a", 2, 4096))

	must.Nil(t, planFails(t, c, coresJob("one", 1, 2)))
	_, _, err := c.Jobs().Register(coresJob("one", 1, 2), nil)
	must.NoError(t, err)
	failed := planFails(t, c, coresJob("two", 1, 1))
	must.MapLen(t, 1, failed)
	m := failed["worker"]
	must.Eq(t, 1, m.NodesExhausted)
	must.Eq(t, map[string]int{"cores": 1}, m.DimensionExhausted)
	must.Nil(t, planFails(t, c, coresJob("one", 1, 2)), must.Sprint("a job's own allocations do not count against its new version"))

	_, _, err = c.Jobs().Deregister("one", false, nil)
	must.NoError(t, err)
	must.Nil(t, planFails(t, c, coresJob("two", 1, 1)), must.Sprint("a stopped job holds nothing"))

	// Scripted allocations hold capacity while pending or running.
	srv.AddJob(coresJob("three", 2, 1))
	srv.Script("three", []nomadtest.Step{
		nomadtest.Allocations("three", 2, 20, api.AllocClientStatusRunning, api.AllocDesiredStatusRun),
		nomadtest.Allocations("three", 2, 20, api.AllocClientStatusComplete, api.AllocDesiredStatusRun)})
	must.MapLen(t, 1, planFails(t, c, coresJob("two", 1, 1)))
	srv.Seek("three", 1)
	must.Nil(t, planFails(t, c, coresJob("two", 1, 1)))

	must.MapLen(t, 1, planFails(t, c, coresJob("huge", 1, 3)), must.Sprint("too big for the node: exhausted, as Nomad says"))

	nodes, _, err := c.Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	must.NoError(t, err)
	must.Len(t, 1, nodes)
	must.EqOp(t, 2, nodes[0].NodeResources.Cpu.TotalCpuCores)
}

// A Node runs a registered job that does not fit only once the job
// holding the capacity has ended: meanwhile it shows a blocked evaluation
// and no allocation.
func TestCapacityNodeQueues(t *testing.T) {
	srv := nomadtest.New(t)
	srv.SetNodes(nomadtest.ClientNode("a", 1, 4096))
	release := make(chan struct{})
	started := make(chan string, 2)
	node := nomadtest.NewNode(t, srv, func(ctx context.Context, job *api.Job) error {
		started <- *job.ID
		if *job.ID == "first" {
			<-release
		}
		return nil
	})
	c := client(t, node.URL)
	_, _, err := c.Jobs().Register(coresJob("first", 1, 1), nil)
	must.NoError(t, err)
	must.EqOp(t, "first", <-started)
	_, _, err = c.Jobs().Register(coresJob("second", 1, 1), nil)
	must.NoError(t, err)

	allocs, _, err := c.Jobs().Allocations("second", true, nil)
	must.NoError(t, err)
	must.SliceEmpty(t, allocs)
	evals, _, err := c.Jobs().Evaluations("second", nil)
	must.NoError(t, err)
	must.Len(t, 2, evals)
	must.EqOp(t, "blocked", evals[1].Status)
	must.Eq(t, map[string]int{"cores": 1}, evals[0].FailedTGAllocs["worker"].DimensionExhausted)
	select {
	case id := <-started:
		t.Fatalf("%s started while the node was full", id)
	default:
	}

	close(release)
	must.EqOp(t, "second", <-started)
}
