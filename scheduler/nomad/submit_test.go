package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

func testJob(id string, count int) *api.Job {
	job := api.NewBatchJob(id, id, "", 50)
	job.Meta = map[string]string{trainspec.MetaRun: id, trainspec.MetaStoragePath: "/srv/results"}
	g := api.NewTaskGroup(trainspec.WorkerGroup, count)
	g.Tasks = []*api.Task{api.NewTask(trainspec.WorkerTask, trainspec.Driver)}
	job.TaskGroups = []*api.TaskGroup{g}
	return job
}

func newTestClient(t *testing.T) (*nomadtest.Server, *Client) {
	t.Helper()
	srv := nomadtest.New(t)
	c, err := NewClient(Config{Address: srv.URL})
	must.NoError(t, err)
	return srv, c
}

var gpuShortage = map[string]*api.AllocationMetric{"worker": {
	NodesEvaluated: 3, NodesExhausted: 3, DimensionExhausted: map[string]int{"devices: nvidia/gpu": 3},
}}

// Two nodes without the train driver, one without Consul: no amount of
// waiting places a worker.
var noTrainDriver = map[string]*api.AllocationMetric{"worker": {
	NodesEvaluated: 3, NodesFiltered: 3,
	ConstraintFiltered: map[string]int{"missing drivers": 2, "${attr.consul.version} semver >= 1.8.0": 1},
}}

func TestAdmitTellsWaitingFromNeverFitting(t *testing.T) {
	for _, c := range []struct {
		name        string
		m           *api.AllocationMetric
		unplaceable bool
	}{
		{"resources busy", gpuShortage["worker"], false},
		{"every node filtered", noTrainDriver["worker"], true},
		{"some filtered, the rest busy", &api.AllocationMetric{NodesEvaluated: 3, NodesFiltered: 2, NodesExhausted: 1,
			ConstraintFiltered: map[string]int{"missing devices": 2}, DimensionExhausted: map[string]int{"memory": 1}}, false},
		{"volume claims held", &api.AllocationMetric{NodesEvaluated: 1, NodesFiltered: 1,
			ConstraintFiltered: map[string]int{"CSI volume data has exhausted its available writer claims": 1}}, false},
		{"empty pool, maybe scaled from zero", &api.AllocationMetric{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Admit(&api.JobPlanResponse{FailedTGAllocs: map[string]*api.AllocationMetric{"worker": c.m}})
			must.ErrorIs(t, err, ErrInsufficientCapacity)
			must.Eq(t, c.unplaceable, errors.Is(err, ErrUnplaceable))
		})
	}
	must.NoError(t, Admit(&api.JobPlanResponse{}))
}

func TestSubmit(t *testing.T) {
	t.Run("plans, stores the secret, then registers", func(t *testing.T) {
		srv, c := newTestClient(t)
		sub, err := Submit(context.Background(), c, testJob("mnist", 2), SubmitOptions{Secret: "s3cr3t-value"})
		must.NoError(t, err)
		must.Eq(t, "mnist", sub.JobID)
		must.Eq(t, "eval-mnist", sub.EvalID)
		must.Eq(t, []string{"PUT /v1/job/mnist/plan", "PUT /v1/var/nomad/jobs/mnist", "PUT /v1/jobs"}, srv.Requests())

		v := srv.Variable("nomad/jobs/mnist")
		must.NotNil(t, v)
		must.Eq(t, "s3cr3t-value", v.Items[trainspec.SecretItem])

		job := srv.Job("mnist")
		b, err := json.Marshal(job)
		must.NoError(t, err)
		must.StrNotContains(t, string(b), "s3cr3t-value")
		task := job.TaskGroups[0].Tasks[0]
		must.Len(t, 1, task.Templates)
		must.Eq(t, `{{ with nomadVar "nomad/jobs/mnist" }}{{ .secret }}{{ end }}`, *task.Templates[0].EmbeddedTmpl)
		must.Eq(t, "secrets/nomad-train.secret", *task.Templates[0].DestPath)
		must.MapNotContainsKey(t, task.Env, workerenv.SecretFile) // the driver's to set
		must.Eq(t, "0400", *task.Templates[0].Perms)

		// The attempt is the secret's, so each submission is a new version
		// of the job; Follow starts at its registration.
		must.Eq(t, storage.AttemptID([]byte("s3cr3t-value")), job.Meta[trainspec.MetaAttempt])
		must.Eq(t, *job.JobModifyIndex, sub.Index)
		again, err := Submit(context.Background(), c, testJob("mnist", 2), SubmitOptions{})
		must.NoError(t, err)
		must.Greater(t, sub.Index, again.Index)
		must.NotEq(t, job.Meta[trainspec.MetaAttempt], srv.Job("mnist").Meta[trainspec.MetaAttempt])
	})
	t.Run("a job renamed after compile reads its own variable", func(t *testing.T) {
		job := testJob("trial-0001", 1)
		job.TaskGroups[0].Tasks[0].Templates = []*api.Template{trainspec.SecretTemplate("base"), {DestPath: new("local/other.conf")}}
		AddSecretTemplate(job)
		tmpls := job.TaskGroups[0].Tasks[0].Templates
		must.Len(t, 2, tmpls)
		must.Eq(t, "local/other.conf", *tmpls[0].DestPath)
		must.StrContains(t, *tmpls[1].EmbeddedTmpl, `"nomad/jobs/trial-0001"`)
	})
	t.Run("generates a fresh secret per run", func(t *testing.T) {
		srv, c := newTestClient(t)
		_, err := Submit(context.Background(), c, testJob("a", 1), SubmitOptions{})
		must.NoError(t, err)
		_, err = Submit(context.Background(), c, testJob("b", 1), SubmitOptions{})
		must.NoError(t, err)
		sa, sb := srv.Variable("nomad/jobs/a").Items[trainspec.SecretItem], srv.Variable("nomad/jobs/b").Items[trainspec.SecretItem]
		must.Eq(t, trainspec.SecretHexLen, len(sa))
		must.NotEq(t, sa, sb)
	})
	t.Run("refuses a gang that does not fit, before registering", func(t *testing.T) {
		srv, c := newTestClient(t)
		srv.FailPlans(gpuShortage)
		_, err := Submit(context.Background(), c, testJob("mnist", 4), SubmitOptions{})
		must.ErrorIs(t, err, ErrInsufficientCapacity)
		var ce *CapacityError
		must.True(t, errors.As(err, &ce))
		must.StrContains(t, ce.Groups["worker"], `exhausted "devices: nvidia/gpu" on 3`)
		// The nodes are asked whether they could run it when idle.
		must.Eq(t, []string{"PUT /v1/job/mnist/plan", "GET /v1/nodes"}, srv.Requests())
		must.Nil(t, srv.Variable("nomad/jobs/mnist"))
	})
	t.Run("waits for capacity by planning again", func(t *testing.T) {
		srv, c := newTestClient(t)
		srv.FailPlans(gpuShortage, gpuShortage)
		var blocked int
		var delays []time.Duration
		_, err := Submit(context.Background(), c, testJob("mnist", 4), SubmitOptions{
			WaitForCapacity: true, PlanInterval: time.Millisecond,
			OnBlocked: func(error) { blocked++ },
			Jitter:    func(d time.Duration) time.Duration { delays = append(delays, d); return d },
		})
		must.NoError(t, err)
		must.Eq(t, 2, blocked)
		must.Eq(t, []time.Duration{time.Millisecond, 2 * time.Millisecond}, delays)
		must.True(t, slices.Contains(srv.Requests(), "PUT /v1/jobs"))
	})
	t.Run("refuses at once, even when told to wait, a gang no node can ever run", func(t *testing.T) {
		srv, c := newTestClient(t)
		srv.FailPlans(noTrainDriver)
		_, err := Submit(context.Background(), c, testJob("mnist", 4), SubmitOptions{WaitForCapacity: true, PlanInterval: time.Millisecond})
		must.ErrorIs(t, err, ErrUnplaceable)
		must.ErrorIs(t, err, ErrInsufficientCapacity)
		must.StrContains(t, err.Error(), `filtered by "missing drivers" on 2`)
		must.StrContains(t, err.Error(), `no node runs the "train" task driver`)
		must.StrContains(t, err.Error(), "no node has Consul")
		must.Eq(t, []string{"PUT /v1/job/mnist/plan"}, srv.Requests())
	})
	t.Run("waiting ends with the context", func(t *testing.T) {
		srv, c := newTestClient(t)
		for range 50 {
			srv.FailPlans(gpuShortage)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := Submit(ctx, c, testJob("mnist", 4), SubmitOptions{WaitForCapacity: true, PlanInterval: 5 * time.Millisecond})
		must.ErrorIs(t, err, context.DeadlineExceeded)
		must.False(t, slices.Contains(srv.Requests(), "PUT /v1/jobs"))
	})
}

func TestStopPurgesSecret(t *testing.T) {
	srv, c := newTestClient(t)
	_, err := Submit(context.Background(), c, testJob("mnist", 1), SubmitOptions{})
	must.NoError(t, err)
	must.NoError(t, Stop(context.Background(), c, "mnist", "", true))
	stopped, purged := srv.Stopped("mnist")
	must.True(t, stopped)
	must.True(t, purged)
	must.Nil(t, srv.Variable("nomad/jobs/mnist"))

	err = Stop(context.Background(), c, "nope", "", false)
	must.Error(t, err)
}

func TestListRuns(t *testing.T) {
	srv, c := newTestClient(t)
	srv.AddJob(testJob("mnist", 2))
	srv.Script("mnist", []nomadtest.Step{nomadtest.Allocations("mnist", 2, 1, api.AllocClientStatusRunning, api.AllocDesiredStatusRun)})
	other := api.NewServiceJob("web", "web", "", 50)
	srv.AddJob(other)
	for _, id := range []string{"queued", "done", "broken", "mixed", "halted"} {
		srv.AddJob(testJob(id, 2))
	}
	srv.Finish("done", map[string]api.TaskGroupSummary{"worker": {Complete: 2}})
	srv.Finish("broken", map[string]api.TaskGroupSummary{"worker": {Failed: 1, Lost: 1}})
	srv.Finish("mixed", map[string]api.TaskGroupSummary{"worker": {Complete: 2, Failed: 1}})
	must.NoError(t, Stop(context.Background(), c, "halted", "", false))
	runs, err := ListRuns(context.Background(), c)
	must.NoError(t, err)
	status := map[string]string{}
	for _, r := range runs {
		must.Eq(t, "/srv/results", r.StoragePath)
		status[r.JobID] = r.Status
	}
	must.Eq(t, map[string]string{
		"mnist": "running", "queued": "pending", "done": "complete", "broken": "failed",
		"mixed": "dead (2 allocations complete, 1 failed)", "halted": "stopped",
	}, status)
}

func TestClientLogs(t *testing.T) {
	srv, c := newTestClient(t)
	rec := loadRecording(t, "gang-complete")
	srv.Script("mnist", rec.Steps)
	id := rec.Steps[1].Allocations[0].ID
	srv.SetLogs(id, "stdout", "step 1 loss 0.9\nstep 2 loss 0.5\n")
	ctx := context.Background()
	alloc, err := c.AllocInfo(ctx, id)
	must.NoError(t, err)
	r, err := c.Logs(ctx, alloc, "worker", "stdout", false)
	must.NoError(t, err)
	defer r.Close()
	var sb strings.Builder
	buf := make([]byte, 64)
	for {
		n, err := r.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	must.Eq(t, "step 1 loss 0.9\nstep 2 loss 0.5\n", sb.String())
}
