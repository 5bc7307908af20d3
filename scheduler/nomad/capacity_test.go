package nomad

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
)

// sizedJob is testJob with count workers of cores cores and memoryMB each.
func sizedJob(id string, count, cores, memoryMB int) *api.Job {
	job := testJob(id, count)
	job.TaskGroups[0].Tasks[0].Resources = &api.Resources{Cores: new(cores), MemoryMB: new(memoryMB)}
	return job
}

func TestIdleShortfall(t *testing.T) {
	down := nomadtest.ClientNode("down", 64, 1<<20)
	down.Status = api.NodeStatusDown
	reserved := nomadtest.ClientNode("r", 4, 4096)
	reserved.ReservedResources = &api.NodeReservedResources{Memory: api.NodeReservedMemoryResources{MemoryMB: 2048}}
	mhz := testJob("mhz", 2)
	mhz.TaskGroups[0].Tasks[0].Resources = &api.Resources{CPU: new(1500), MemoryMB: new(100)}
	spread := sizedJob("spread", 3, 1, 100)
	spread.TaskGroups[0].Constraints = []*api.Constraint{api.NewConstraint("", api.ConstraintDistinctHosts, "true")}
	for _, c := range []struct {
		name  string
		job   *api.Job
		nodes []*api.NodeListStub
		short bool
	}{
		{"fits one node", sizedJob("j", 2, 1, 1024), []*api.NodeListStub{nomadtest.ClientNode("a", 2, 4096)}, false},
		{"more cores than any node", sizedJob("j", 1, 4, 1024), []*api.NodeListStub{nomadtest.ClientNode("a", 2, 4096), nomadtest.ClientNode("b", 2, 4096)}, true},
		{"gang larger than the cluster", sizedJob("j", 5, 1, 1024), []*api.NodeListStub{nomadtest.ClientNode("a", 2, 4096), nomadtest.ClientNode("b", 2, 4096)}, true},
		{"gang spread over two nodes", sizedJob("j", 4, 1, 1024), []*api.NodeListStub{nomadtest.ClientNode("a", 2, 4096), nomadtest.ClientNode("b", 2, 4096)}, false},
		{"down nodes do not count", sizedJob("j", 1, 4, 1024), []*api.NodeListStub{nomadtest.ClientNode("a", 2, 4096), down}, true},
		{"no ready node: maybe scaled from zero", sizedJob("j", 1, 4, 1024), []*api.NodeListStub{down}, false},
		{"reserved memory is not the workers'", sizedJob("j", 1, 1, 3000), []*api.NodeListStub{reserved}, true},
		{"MHz asks", mhz, []*api.NodeListStub{nomadtest.ClientNode("a", 2, 4096)}, true},
		{"distinct hosts", spread, []*api.NodeListStub{nomadtest.ClientNode("a", 8, 8192), nomadtest.ClientNode("b", 8, 8192)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			why := IdleShortfall(c.job, c.nodes)
			must.Eq(t, c.short, len(why) > 0, must.Sprint(why))
		})
	}
	why := IdleShortfall(sizedJob("j", 1, 4, 1024), []*api.NodeListStub{nomadtest.ClientNode("a", 2, 4096)})
	must.Eq(t, []string{`group "worker" has 1 allocations of 4 cores, 1024 MB memory each, but the 1 ready node could hold only 0 with nothing else running (largest: a, 2 cores, 2000 MHz, 4096 MB): ask for less in resources_per_worker or add bigger nodes`}, why)
}

// On a cluster too small for the gang even when idle, Submit refuses at
// once, saying what the nodes have, even when asked to wait; on one that
// is merely full, it waits until the job holding the capacity is gone.
func TestSubmitTellsFullFromTooSmall(t *testing.T) {
	srv, c := newTestClient(t)
	srv.SetNodes(nomadtest.ClientNode("a", 2, 4096))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err := Submit(ctx, c, sizedJob("big", 1, 4, 1024), SubmitOptions{WaitForCapacity: true, PlanInterval: 1})
	must.ErrorIs(t, err, ErrUnplaceable)
	must.StrContains(t, err.Error(), "could hold only 0")

	_, err = Submit(ctx, c, sizedJob("holder", 1, 2, 1024), SubmitOptions{})
	must.NoError(t, err)
	_, err = Submit(ctx, c, sizedJob("small", 1, 1, 1024), SubmitOptions{})
	must.ErrorIs(t, err, ErrInsufficientCapacity)
	must.False(t, errors.Is(err, ErrUnplaceable), must.Sprint("a full cluster is not a too small one"))

	blocked := 0
	sub, err := Submit(ctx, c, sizedJob("small", 1, 1, 1024), SubmitOptions{WaitForCapacity: true, PlanInterval: 1,
		OnBlocked: func(err error) {
			blocked++
			must.ErrorIs(t, err, ErrInsufficientCapacity)
			must.False(t, errors.Is(err, ErrUnplaceable))
			if blocked == 3 {
				must.NoError(t, Stop(ctx, c, "holder", "", true))
			}
		}})
	must.NoError(t, err)
	must.EqOp(t, "small", sub.JobID)
	must.EqOp(t, 3, blocked)
}
