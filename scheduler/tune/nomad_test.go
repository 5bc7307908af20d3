package tune

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	trainhcl "github.com/nomad-train/nomad-train/hcl"
	"github.com/nomad-train/nomad-train/scheduler/local"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/trainer"
)

// fakeCluster is the fake Nomad API (nomadtest) with a client node in
// front of it: when a job is registered, the node runs its workers on this
// machine as the train driver would (scheduler/local, with the task's run
// name, world size, storage path and config, and this test binary as the
// worker), and scripts the job's allocations from what they do (running,
// then complete or failed). Deregistering the job stops its workers
// (SIGTERM, as Nomad does), after which its allocations are complete with
// desired status stop.
type fakeCluster struct {
	t      *testing.T
	srv    *nomadtest.Server
	URL    string
	args   []string // the worker's arguments (-test.run=...)
	jobs   sync.WaitGroup
	mu     sync.Mutex
	gen    uint64                        // guarded by mu: allocation generations
	cancel map[string]context.CancelFunc // guarded by mu: running jobs' workers
}

func newFakeCluster(t *testing.T, workerArgs ...string) *fakeCluster {
	f := &fakeCluster{t: t, srv: nomadtest.New(t), args: workerArgs, cancel: map[string]context.CancelFunc{}}
	target, err := url.Parse(f.srv.URL)
	must.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // blocking queries the client gave up on
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case (r.Method == http.MethodPut || r.Method == http.MethodPost) && r.URL.Path == "/v1/jobs":
			body, err := io.ReadAll(r.Body)
			must.NoError(t, err)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req api.JobRegisterRequest
			must.NoError(t, json.Unmarshal(body, &req))
			f.start(req.Job) // its allocations exist before Register answers
			proxy.ServeHTTP(w, r)
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/job/"):
			proxy.ServeHTTP(w, r)
			f.mu.Lock()
			if cancel := f.cancel[strings.TrimPrefix(r.URL.Path, "/v1/job/")]; cancel != nil {
				cancel()
			}
			f.mu.Unlock()
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	f.URL = front.URL
	t.Cleanup(func() {
		f.mu.Lock()
		for _, c := range f.cancel {
			c()
		}
		f.mu.Unlock()
		f.jobs.Wait()
		front.Close()
	})
	return f
}

// allocs is the job's allocation list with every rank in one state.
func (f *fakeCluster) allocs(job string, n int, gen uint64, client, desired string) []nomadtest.Step {
	var as []*api.AllocationListStub
	for r := range n {
		as = append(as, &api.AllocationListStub{ID: fmt.Sprintf("%s-%d-%d", job, gen, r), JobID: job,
			Name: fmt.Sprintf("%s.%s[%d]", job, trainhcl.WorkerGroup, r), TaskGroup: trainhcl.WorkerGroup,
			ClientStatus: client, DesiredStatus: desired, CreateIndex: gen, ModifyIndex: gen})
	}
	return []nomadtest.Step{{Allocations: as, Evaluations: []*api.Evaluation{}}}
}

// start runs a registered job's workers.
func (f *fakeCluster) start(job *api.Job) {
	cfg := job.TaskGroups[0].Tasks[0].Config
	id := *job.ID
	world := int(cfg["world_size"].(float64))
	f.mu.Lock()
	f.gen++
	gen := f.gen
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel[id] = cancel
	f.mu.Unlock()
	f.srv.Script(id, f.allocs(id, world, gen, api.AllocClientStatusRunning, api.AllocDesiredStatusRun))
	f.jobs.Go(func() {
		out, err := local.Launch(ctx, local.Options{Command: os.Args[0], Args: f.args, NumWorkers: world,
			RunName: cfg["run_name"].(string), StoragePath: cfg["storage_path"].(string),
			Config: []byte(cfg["train_config"].(string)), StopGrace: 100 * time.Millisecond})
		client, desired := api.AllocClientStatusComplete, api.AllocDesiredStatusRun
		switch {
		case ctx.Err() != nil:
			desired = api.AllocDesiredStatusStop
		case err != nil || out.Failed():
			client = api.AllocClientStatusFailed
		}
		f.mu.Lock()
		delete(f.cancel, id)
		f.mu.Unlock()
		f.srv.Script(id, f.allocs(id, world, gen, client, desired))
	})
}

// count returns how many requests were "METHOD path".
func (f *fakeCluster) count(req string) int {
	n := 0
	for _, r := range f.srv.Requests() {
		if r == req {
			n++
		}
	}
	return n
}

const nomadTuneSpec = `
train "nt" {
  entrypoint { command = "worker" }
  config = {
    lr     = loguniform(1e-4, 1)
    epochs = 8
  }
  scaling { num_workers = 1 }
  run {
    storage_path = %q
    failure { max_failures = 1 }
  }
  tune {
    num_samples           = 6
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
    seed                  = 5
    scheduler {
      type             = "asha"
      max_t            = 9
      grace_period     = 1
      reduction_factor = 3
    }
  }
}
`

// onFakeNomad sets up a test of the Nomad backend: in a worker copy of the
// test binary it runs fn and exits; otherwise it returns a fake cluster
// whose node runs fn, a client of it, and nomadTuneSpec (storage in a
// temporary directory) with its search space.
func onFakeNomad(t *testing.T, fn trainer.TrainFunc) (*fakeCluster, *nomad.Client, *trainhcl.Spec, map[string]any) {
	asWorker(fn)
	t.Setenv("GORACE", "atexit_sleep_ms=0") // workers under -race exit at once
	fc := newFakeCluster(t, "-test.run=^"+t.Name()+"$")
	c, err := nomad.NewClient(nomad.Config{Address: fc.URL})
	must.NoError(t, err)
	spec, diags := trainhcl.Parse(fmt.Appendf(nil, nomadTuneSpec, t.TempDir()), "train.hcl", trainhcl.ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	space, err := ParseSpace(spec.ConfigJSON)
	must.NoError(t, err)
	return fc, c, spec, space
}

// A tune on Nomad: every trial is its own job, registered after a plan
// with its secret, its workers (run by the fake node) report into the
// trial's storage directory, ASHA stops the poor trials through Nomad
// (deregister, then purge once their allocations ended, secret deleted),
// and the trials that finish (8 epochs, under max_t) leave their jobs
// complete.
func TestNomadJobsASHA(t *testing.T) {
	fc, c, spec, space := onFakeNomad(t, synthTrain)

	var mu sync.Mutex
	phases := map[string][]nomad.Phase{}
	b := &NomadJobs{API: c, Spec: spec, StopTimeout: 10 * time.Second,
		OnStatus: func(trial string, st nomad.Status) {
			mu.Lock()
			phases[trial] = append(phases[trial], st.Phase)
			mu.Unlock()
		}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := New(b, space, Config{Name: spec.Name, StoragePath: spec.Run.StoragePath,
		NumSamples: 6, MaxConcurrentTrials: 2, Metric: "loss", Mode: ModeMin, Seed: 5,
		PollInterval: 10 * time.Millisecond,
		Scheduler:    SchedulerConfig{Type: SchedulerASHA, MaxT: 9, GracePeriod: 1, ReductionFactor: 3}}).Fit(ctx)
	must.NoError(t, err)

	early, finished := 0, 0
	for _, tr := range g.Trials {
		id := trainhcl.TrialJobID("nt", tr.ID)
		job := fc.srv.Job(id)
		must.NotNil(t, job, must.Sprintf("trial %s has no job", tr.ID))
		cfg := job.TaskGroups[0].Tasks[0].Config
		must.EqOp(t, tr.ID, cfg["run_name"].(string))
		must.EqOp(t, g.Path, cfg["storage_path"].(string))
		must.EqOp(t, 1, fc.count("PUT /v1/job/"+id+"/plan"), must.Sprint("gang admission before registering"))
		isStopped, purged := fc.srv.Stopped(id)
		t.Logf("%s %s iterations=%d stopped=%v purged=%v phases=%v", tr.ID, tr.Status, tr.Iterations, isStopped, purged, phases[tr.ID])
		switch tr.Status {
		case StatusStopped:
			early++
			must.Less(t, 8, tr.Iterations)
			must.True(t, isStopped && purged, must.Sprintf("ASHA's stop of %s did not purge its job", tr.ID))
			must.EqOp(t, 2, fc.count("DELETE /v1/job/"+id), must.Sprint("stop, then purge"))
			must.Nil(t, fc.srv.Variable(nomad.SecretPath(id)))
		case StatusTerminated:
			finished++
			must.EqOp(t, 8, tr.Iterations)
			must.False(t, isStopped)
			must.NotNil(t, fc.srv.Variable(nomad.SecretPath(id)))
			mu.Lock()
			must.SliceContains(t, phases[tr.ID], nomad.PhaseComplete)
			mu.Unlock()
		default:
			t.Fatalf("trial %s ended %s: %s", tr.ID, tr.Status, tr.Reason)
		}
	}
	must.Positive(t, early)
	must.Positive(t, finished)
	must.Less(t, 6*8, g.TotalIterations())
	must.EqOp(t, 6, fc.count("PUT /v1/jobs"), must.Sprint("one job per trial"))
	must.True(t, slices.Contains(fc.srv.Requests(), "PUT /v1/var/nomad/jobs/nt-trial_0000"))
}

// failTrain is a training function that always fails.
func failTrain(ctx context.Context, s *trainer.Session) error { return errors.New("diverged") }

// A trial whose job fails is restarted within the tuner's failure budget
// as a new job (the failed one purged first, since Nomad would not run a
// finished batch job again), and ends ERROR when the budget is spent.
func TestNomadJobsFailedTrial(t *testing.T) {
	fc, c, spec, _ := onFakeNomad(t, failTrain)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := New(&NomadJobs{API: c, Spec: spec}, map[string]any{"lr": 0.1, "epochs": 3},
		Config{Name: spec.Name, StoragePath: spec.Run.StoragePath, MaxFailures: 1}).Fit(ctx)
	must.NoError(t, err)
	must.EqOp(t, StatusError, g.Trials[0].Status)
	must.StrContains(t, g.Trials[0].Reason, "run failed")
	id := trainhcl.TrialJobID("nt", "trial_0000")
	must.EqOp(t, 2, fc.count("PUT /v1/jobs"))
	must.EqOp(t, 2, fc.count("DELETE /v1/job/"+id), must.Sprint("the failed job is stopped and purged before the retry"))
	stopped, purged := fc.srv.Stopped(id)
	must.False(t, stopped || purged, must.Sprint("the retry's job is registered anew"))
}

// A tuner restarted while a trial's job still runs on the cluster adopts
// that job (same spec, so the same trial and config) instead of
// registering it again, and follows it to its end.
func TestNomadJobsAdoptsRunningJob(t *testing.T) {
	fc, c, spec, _ := onFakeNomad(t, failTrain)
	expDir := spec.Run.StoragePath + "/nt"
	job, diags := trainhcl.CompileTrial(spec, "trial_0000", expDir, []byte(`{"epochs":3,"lr":0.1}`))
	must.False(t, diags.HasErrors())
	id := *job.ID
	fc.srv.AddJob(job)
	running := fc.allocs(id, 1, 1, api.AllocClientStatusRunning, api.AllocDesiredStatusRun)
	complete := fc.allocs(id, 1, 1, api.AllocClientStatusComplete, api.AllocDesiredStatusRun)
	fc.srv.Script(id, append(running, complete...))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := (&NomadJobs{API: c, Spec: spec}).Run(ctx, TrialSpec{ID: "trial_0000", StoragePath: expDir,
		Config: []byte(`{"epochs":3,"lr":0.1}`)})
	must.NoError(t, err)
	must.EqOp(t, 0, fc.count("PUT /v1/jobs"))
	must.EqOp(t, 0, fc.count("DELETE /v1/job/"+id))

	// A job of the same trial with another config is not adopted: it is
	// purged and the trial's job registered anew.
	err = (&NomadJobs{API: c, Spec: spec, StopTimeout: 5 * time.Second}).Run(ctx, TrialSpec{ID: "trial_0000",
		StoragePath: expDir, Config: []byte(`{"epochs":3,"lr":0.2}`)})
	must.Error(t, err) // the worker fails
	must.EqOp(t, 2, fc.count("DELETE /v1/job/"+id))
	must.EqOp(t, 1, fc.count("PUT /v1/jobs"))
}
