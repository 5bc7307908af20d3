package tune

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/storeuri"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// fakeCluster is the fake Nomad API with a node in front of it that runs
// registered jobs' workers on this machine (nomadtest.Node).
type fakeCluster struct {
	srv  *nomadtest.Server
	node *nomadtest.Node
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
func onFakeNomad(t *testing.T, fn trainer.TrainFunc) (*fakeCluster, *nomad.Client, *trainspec.Spec, map[string]any) {
	asWorker(fn)
	t.Setenv("GORACE", "atexit_sleep_ms=0") // workers under -race exit at once
	srv := nomadtest.New(t)
	fc := &fakeCluster{srv: srv, node: nomadtest.NewNode(t, srv,
		nomadtest.LocalWorkers(os.Args[0], []string{"-test.run=^" + t.Name() + "$"}, nil))}
	c, err := nomad.NewClient(nomad.Config{Address: fc.node.URL})
	must.NoError(t, err)
	spec, diags := trainspec.Parse(fmt.Appendf(nil, nomadTuneSpec, t.TempDir()), "train.hcl", trainspec.ParseOptions{})
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
		Scheduler:    ASHASettings{MaxT: 9, GracePeriod: 1, ReductionFactor: 3}}).Fit(ctx)
	must.NoError(t, err)

	early, finished := 0, 0
	for _, tr := range g.Trials {
		id := trainspec.TrialJobID("nt", tr.ID)
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
			must.StrContains(t, tr.Reason, "rung") // it may run on a little until its stop lands
			must.True(t, isStopped && purged, must.Sprintf("ASHA's stop of %s did not purge its job", tr.ID))
			must.EqOp(t, 2, fc.count("DELETE /v1/job/"+id), must.Sprint("stop, then purge"))
			must.Nil(t, fc.srv.Variable(trainspec.SecretVariablePath(id)))
		case StatusTerminated:
			finished++
			must.EqOp(t, 8, tr.Iterations)
			must.False(t, isStopped)
			must.NotNil(t, fc.srv.Variable(trainspec.SecretVariablePath(id)))
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
	kv := &recordingKV{fc: fc}
	g, err := New(&NomadJobs{API: c, Spec: spec, KV: kv}, map[string]any{"lr": 0.1, "epochs": 3},
		Config{Name: spec.Name, StoragePath: spec.Run.StoragePath, MaxFailures: 1}).Fit(ctx)
	must.NoError(t, err)
	must.EqOp(t, StatusError, g.Trials[0].Status)
	must.StrContains(t, g.Trials[0].Reason, "run failed")
	id := trainspec.TrialJobID("nt", "trial_0000")
	must.EqOp(t, 2, fc.count("PUT /v1/jobs"))
	must.EqOp(t, 2, fc.count("DELETE /v1/job/"+id), must.Sprint("the failed job is stopped and purged before the retry"))
	stopped, purged := fc.srv.Stopped(id)
	must.False(t, stopped || purged, must.Sprint("the retry's job is registered anew"))
	// Each attempt starts with the whole failure budget: the rendezvous
	// keys of the one before are gone before its job is registered.
	prefix := storeuri.NomadJobPrefix("", id)
	must.Eq(t, []string{prefix + " before 0 registrations", prefix + " before 1 registrations"}, kv.deleted)
}

// A Consul whose keys the tuner cannot clear (the detached tuner's client
// agent refusing its token, say) costs a trial at most a generation of
// its budget: the trial still runs, and the tuner says why it could not.
func TestNomadJobsRunsTrialWhoseKeysStay(t *testing.T) {
	_, c, spec, _ := onFakeNomad(t, synthTrain)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	g, err := New(&NomadJobs{API: c, Spec: spec, KV: refusingKV{}, Logger: log}, map[string]any{"lr": 0.1, "epochs": 3},
		Config{Name: spec.Name, StoragePath: spec.Run.StoragePath}).Fit(ctx)
	must.NoError(t, err)
	must.EqOp(t, StatusTerminated, g.Trials[0].Status, must.Sprint(g.Trials[0].Reason))
	must.StrContains(t, logs.String(), "could not clear the trial's rendezvous keys")
	must.StrContains(t, logs.String(), "Permission denied")
}

// refusingKV is a Consul KV whose deletes are refused.
type refusingKV struct{}

func (refusingKV) DeleteTree(string, *consul.WriteOptions) (*consul.WriteMeta, error) {
	return nil, errors.New("Unexpected response code: 403 (Permission denied)")
}

// recordingKV records the Consul prefixes deleted and how many jobs had
// been registered at the time.
type recordingKV struct {
	fc      *fakeCluster
	deleted []string
}

func (k *recordingKV) DeleteTree(prefix string, _ *consul.WriteOptions) (*consul.WriteMeta, error) {
	k.deleted = append(k.deleted, fmt.Sprintf("%s before %d registrations", prefix, k.fc.count("PUT /v1/jobs")))
	return &consul.WriteMeta{}, nil
}

// A tuner restarted while a trial's job still runs on the cluster adopts
// that job (same spec, so the same trial and config) instead of
// registering it again, and follows it to its end.
func TestNomadJobsAdoptsRunningJob(t *testing.T) {
	fc, c, spec, _ := onFakeNomad(t, failTrain)
	expDir := spec.Run.StoragePath + "/nt"
	job, diags := trainspec.CompileTrial(spec, "trial_0000", expDir, []byte(`{"epochs":3,"lr":0.1}`))
	must.False(t, diags.HasErrors())
	id := *job.ID
	fc.srv.AddJob(job)
	fc.srv.Script(id, []nomadtest.Step{
		nomadtest.Allocations(id, 1, 1, api.AllocClientStatusRunning, api.AllocDesiredStatusRun),
		nomadtest.Allocations(id, 1, 1, api.AllocClientStatusComplete, api.AllocDesiredStatusRun)})

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

// A restarted tuner whose trial's job completed while it was down adopts
// the finished job (its run is over) rather than running the trial again.
func TestNomadJobsAdoptsCompletedJob(t *testing.T) {
	fc, c, spec, _ := onFakeNomad(t, failTrain)
	expDir := spec.Run.StoragePath + "/nt"
	job, diags := trainspec.CompileTrial(spec, "trial_0000", expDir, []byte(`{"epochs":3,"lr":0.1}`))
	must.False(t, diags.HasErrors())
	id := *job.ID
	fc.srv.AddJob(job)
	fc.srv.Script(id, []nomadtest.Step{nomadtest.Allocations(id, 1, 1, api.AllocClientStatusComplete, api.AllocDesiredStatusRun)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := (&NomadJobs{API: c, Spec: spec}).Run(ctx, TrialSpec{ID: "trial_0000", StoragePath: expDir,
		Config: []byte(`{"epochs":3,"lr":0.1}`)})
	must.NoError(t, err)
	must.EqOp(t, 0, fc.count("PUT /v1/jobs"), must.Sprint("a finished trial is not run again"))
	must.EqOp(t, 0, fc.count("DELETE /v1/job/"+id))
}

// A restarted tuner whose trial's job was registered but not yet placed
// (the tuner stopped between the two, or the gang waits for capacity)
// adopts the waiting job, which keeps its place in Nomad's queue, rather
// than purging and registering it again. A job with no allocation that
// is dead (they were garbage-collected) is not waiting: it is purged and
// registered anew.
func TestNomadJobsAdoptsWaitingJob(t *testing.T) {
	fc, c, spec, _ := onFakeNomad(t, failTrain)
	expDir := spec.Run.StoragePath + "/nt"
	config := []byte(`{"epochs":3,"lr":0.1}`)
	job, diags := trainspec.CompileTrial(spec, "trial_0000", expDir, config)
	must.False(t, diags.HasErrors())
	id := *job.ID
	fc.srv.AddJob(job)
	blocked := nomadtest.Step{Evaluations: []*api.Evaluation{{ID: "e1", JobID: id, Status: "blocked"}}}
	fc.srv.Script(id, []nomadtest.Step{blocked,
		nomadtest.Allocations(id, 1, 2, api.AllocClientStatusRunning, api.AllocDesiredStatusRun),
		nomadtest.Allocations(id, 1, 2, api.AllocClientStatusComplete, api.AllocDesiredStatusRun)})
	var logs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := (&NomadJobs{API: c, Spec: spec, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})}).Run(ctx,
		TrialSpec{ID: "trial_0000", StoragePath: expDir, Config: config})
	must.NoError(t, err, must.Sprint(logs.String()))
	must.EqOp(t, 0, fc.count("PUT /v1/jobs"), must.Sprint(logs.String()))
	must.EqOp(t, 0, fc.count("DELETE /v1/job/"+id))
	must.StrContains(t, logs.String(), "adopting the trial's job, registered and waiting to be placed")

	// Dead, its allocations collected: purged and registered again.
	fc.srv.Script(id, nil)
	fc.srv.Finish(id, map[string]api.TaskGroupSummary{})
	err = (&NomadJobs{API: c, Spec: spec, StopTimeout: 5 * time.Second}).Run(ctx, TrialSpec{ID: "trial_0000",
		StoragePath: expDir, Config: config})
	must.Error(t, err) // the worker fails
	must.EqOp(t, 2, fc.count("DELETE /v1/job/"+id), must.Sprint("stopped, then purged"))
	must.EqOp(t, 1, fc.count("PUT /v1/jobs"))
}

// A tuner whose experiment another tuner has taken over (its lease on S3
// expired: a partition, a stalled host; here a later start in the same
// allocation takes it) leaves the trials' jobs running when it ends, even
// when it ends as one asked to stop (Nomad stops the old allocation once
// its node is back), for the new tuner to adopt; and it writes no state
// over the new tuner's. A tuner that still holds the experiment stops
// its trials' jobs as before.
func TestTunerTakenOverLeavesTrialJobs(t *testing.T) {
	s3 := s3test.Start(t)
	s3.SetKeys(t)
	srv := nomadtest.New(t)
	// The node holds the trials' allocations running until their jobs stop.
	node := nomadtest.NewNode(t, srv, func(ctx context.Context, job *api.Job) error {
		<-ctx.Done()
		return nil
	})
	c := newNomadClient(t, node.URL)
	fc := &fakeCluster{srv: srv, node: node}
	for _, takeOver := range []bool{false, true} {
		t.Run(fmt.Sprintf("taken over %v", takeOver), func(t *testing.T) {
			name := fmt.Sprintf("to%v", takeOver)
			src := fmt.Sprintf(`
train %q {
  entrypoint { command = "worker" }
  config = { lr = grid_search([0.1, 0.2]) }
  run {
    storage {
      path       = "s3://%s/runs"
      endpoint   = %q
      region     = %q
      path_style = true
    }
  }
  tune {
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
  }
}
`, name, s3.Bucket, s3.Endpoint, s3.Region)
			spec, diags := trainspec.Parse([]byte(src), "train.hcl", trainspec.ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			x, err := FromSpec(spec)
			must.NoError(t, err)
			cfg := x.Config
			cfg.Instance, cfg.PollInterval = "alloc-1", 10*time.Millisecond
			where := "s3://" + s3.Bucket + "/runs/" + name
			opts := cfg.storageOpts()

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := New(&NomadJobs{API: c, Spec: spec, StopTimeout: 5 * time.Second}, x.Space, cfg).Fit(ctx)
				done <- err
			}()
			jobs := []string{trainspec.TrialJobID(name, "trial_0000"), trainspec.TrialJobID(name, "trial_0001")}
			var running *ExperimentState
			waitUntil(t, 30*time.Second, "both trials' jobs registered and recorded RUNNING", func() bool {
				st, ok, err := LoadState(context.Background(), where, opts...)
				if err != nil || !ok || len(st.Trials) != 2 || srv.Job(jobs[0]) == nil || srv.Job(jobs[1]) == nil {
					return false
				}
				running = st
				return st.Trials[0].Status == StatusRunning && st.Trials[1].Status == StatusRunning
			})
			if takeOver {
				thief, err := storage.OpenExperiment(context.Background(), where,
					append(opts, storage.WithWriter("alloc-1", uint64(time.Now().UnixNano())))...)
				must.NoError(t, err)
				defer thief.Close()
			}
			cancel() // SIGTERM
			err = <-done
			for _, id := range jobs {
				stopped, _ := srv.Stopped(id)
				must.EqOp(t, !takeOver, stopped, must.Sprint(id))
				must.EqOp(t, !takeOver, fc.count("DELETE /v1/job/"+id) > 0, must.Sprint(id))
			}
			st, _, lerr := LoadState(context.Background(), where, opts...)
			must.NoError(t, lerr)
			if takeOver {
				must.ErrorIs(t, err, ErrLocked)
				must.ErrorIs(t, err, storage.ErrLocked)
				must.Eq(t, running.Trials, st.Trials, must.Sprint("the state is the new tuner's to write"))
			} else {
				must.ErrorIs(t, err, context.Canceled)
				must.EqOp(t, StatusPending, st.Trials[0].Status, must.Sprint("stopped by the interruption: to run again"))
			}
		})
	}
}

// waitUntil polls cond every 10 ms until it holds or timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
