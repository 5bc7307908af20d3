package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// s3Root starts a real S3 server (skipped without its binary) and gives
// its credentials the standard AWS way, the environment, and nothing
// else: the endpoint comes through the storage options, as a run's
// storage block gives them. It returns s3://<bucket>/runs.
func s3Root(t *testing.T) (string, workerenv.StorageOptions) {
	t.Helper()
	srv := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return "s3://" + srv.Bucket + "/runs", workerenv.StorageOptions{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}
}

// openS3 opens run's writer on the store, as a worker's rank 0 does.
func openS3(t *testing.T, root, run string, o workerenv.StorageOptions, p storage.Policy) storage.RunStore {
	t.Helper()
	w, err := storage.OpenStore(context.Background(), root, run, p, storage.WithStorageOptions(o), storage.WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	return w
}

func listRuns(t *testing.T, base string) map[string]RunSummary {
	t.Helper()
	resp, err := http.Get(base + "/api/runs")
	must.NoError(t, err)
	defer resp.Body.Close()
	must.EqOp(t, http.StatusOK, resp.StatusCode)
	var runs []RunSummary
	must.NoError(t, json.NewDecoder(resp.Body).Decode(&runs))
	byKey := map[string]RunSummary{}
	for _, r := range runs {
		byKey[r.Key] = r
	}
	return byKey
}

// A run kept on S3, opened by its own s3:// path: the dashboard shows its
// storage path with the run in it, streams its records and checkpoints
// (a manifest makes one), follows what is written next (retention's
// deletion drops out), and shows it failed once it is marked so.
func TestRunOnS3(t *testing.T) {
	root, o := s3Root(t)
	run := openS3(t, root, "r", o, storage.Policy{NumToKeep: 1})
	appendSteps(t, run, 1)
	commit(t, run, 2, 0.5)
	// The commit's record may follow in the background: closing the
	// writer waits for it, and the run goes on with a new one.
	must.NoError(t, run.Close())
	run = openS3(t, root, "r", o, storage.Policy{NumToKeep: 1})
	hs := newTestServer(t, Options{Root: root + "/r", Storage: o})

	runs := listRuns(t, hs.URL)
	must.MapLen(t, 1, runs)
	must.EqOp(t, int64(2), runs["r"].Step)
	must.EqOp(t, "", runs["r"].Error)

	ev := openEvents(t, hs.URL, "/api/run/events?key=r")
	var u RunUpdate
	ev.next(&u)
	must.True(t, u.Reset)
	must.EqOp(t, "r", u.Name)
	must.SliceLen(t, 2, u.Records)
	must.NotNil(t, u.Checkpoints)
	must.SliceLen(t, 1, *u.Checkpoints)
	must.EqOp(t, "checkpoint_000000", (*u.Checkpoints)[0].Name)

	commit(t, run, 3, 0.25) // retention deletes checkpoint_000000
	// The stream may look between the commit's manifest, its record and
	// the deletion: gather events until both are seen.
	var got []int64
	ckpts := []string{"checkpoint_000000"}
	for len(got) == 0 || len(ckpts) != 1 || ckpts[0] != "checkpoint_000001" {
		u = RunUpdate{}
		ev.next(&u)
		must.False(t, u.Reset)
		for _, p := range u.Records {
			got = append(got, p.Step)
		}
		if u.Checkpoints != nil {
			ckpts = nil
			for _, c := range *u.Checkpoints {
				ckpts = append(ckpts, c.Name)
			}
		}
	}
	must.Eq(t, []int64{3}, got, must.Sprint("only the new record is sent"))

	must.NoError(t, storage.MarkFailed(root, "r", storage.Failure{Reason: "boom", ExitCode: 3}, storage.WithStorageOptions(o)))
	u = RunUpdate{}
	ev.next(&u)
	must.NotNil(t, u.Failure)
	must.EqOp(t, "boom", u.Failure.Reason)
	must.EqOp(t, "failed", listRuns(t, hs.URL)["r"].State)
}

// The runs under an S3 prefix are the names with progress records: an
// experiment's trials one level down are not runs of the prefix, but are
// those of the experiment's own prefix. A wrong bucket fails at once.
func TestRunListUnderS3Prefix(t *testing.T) {
	root, o := s3Root(t)
	for _, name := range []string{"a", "b"} {
		appendSteps(t, openS3(t, root, name, o, storage.Policy{}), 1)
	}
	appendSteps(t, openS3(t, root+"/exp", "trial_0000", o, storage.Policy{}), 1, 2)

	runs := listRuns(t, newTestServer(t, Options{Root: root, Storage: o}).URL)
	must.MapLen(t, 2, runs)
	must.MapContainsKeys(t, runs, []string{"a", "b"})
	trials := listRuns(t, newTestServer(t, Options{Root: root + "/exp/", Storage: o}).URL)
	must.MapLen(t, 1, trials)
	must.EqOp(t, int64(2), trials["trial_0000"].Step)

	_, err := New(context.Background(), Options{Root: "s3://no-such-bucket-here/runs", Storage: o})
	must.Error(t, err)
}

// An experiment whose trials are kept on S3 (its state, on this machine,
// says where): the experiment page streams each trial's records from the
// store, and what a trial writes next.
func TestExperimentTrialsOnS3(t *testing.T) {
	root, o := s3Root(t)
	dir := t.TempDir()
	writeState(t, dir, tune.ExperimentState{Version: 1, Name: "exp",
		TrialStorage: root + "/exp", TrialStorageOptions: &o,
		Trials: []*tune.TrialState{{ID: "trial_0000", Status: tune.StatusRunning, Config: map[string]any{"lr": 0.1}}}})
	trial := openS3(t, root+"/exp", "trial_0000", o, storage.Policy{})
	appendSteps(t, trial, 1, 2)

	hs := newTestServer(t, Options{Root: dir})
	ev := openEvents(t, hs.URL, "/api/experiment/events?key=.")
	var u ExperimentUpdate
	ev.next(&u)
	must.SliceLen(t, 1, u.Trials)
	must.NotNil(t, u.Records["trial_0000"])
	must.SliceLen(t, 2, u.Records["trial_0000"].Records)
	appendSteps(t, trial, 3)
	u = ExperimentUpdate{}
	ev.next(&u)
	must.SliceLen(t, 1, u.Records["trial_0000"].Records)
	must.EqOp(t, int64(3), u.Records["trial_0000"].Records[0].Step)
}

// An experiment kept whole on S3 (its state beside its trials, as a tune
// with storage on S3 keeps it): the runs page under the bucket's prefix
// lists it, and its page streams its trials' records.
func TestExperimentWholeOnS3(t *testing.T) {
	root, o := s3Root(t)
	b, err := json.Marshal(tune.ExperimentState{Version: 1, Name: "exp",
		TrialStorage: root + "/exp", TrialStorageOptions: &o,
		Trials: []*tune.TrialState{{ID: "trial_0000", Status: tune.StatusRunning, Config: map[string]any{"lr": 0.1}}}})
	must.NoError(t, err)
	x, err := storage.OpenExperiment(context.Background(), root+"/exp", storage.WithStorageOptions(o))
	must.NoError(t, err)
	must.NoError(t, x.WriteState(b))
	must.NoError(t, x.Close())
	appendSteps(t, openS3(t, root+"/exp", "trial_0000", o, storage.Policy{}), 1, 2)

	hs := newTestServer(t, Options{Root: root, Storage: o})
	listed := listRuns(t, hs.URL)
	must.MapContainsKey(t, listed, "exp")
	must.EqOp(t, "experiment", listed["exp"].Kind)
	ev := openEvents(t, hs.URL, "/api/experiment/events?key=exp")
	var u ExperimentUpdate
	ev.next(&u)
	must.SliceLen(t, 1, u.Trials)
	must.SliceLen(t, 2, u.Records["trial_0000"].Records)
}

// A Nomad job whose storage is on S3: its page shows the workers and the
// run's curves, read from the store with the options the job gives its
// workers.
func TestNomadRunOnS3(t *testing.T) {
	root, o := s3Root(t)
	appendSteps(t, openS3(t, root, "r", o, storage.Policy{}), 1, 2)
	srv := nomadtest.New(t)
	job := api.NewBatchJob("r", "r", "", 50)
	job.Meta = map[string]string{trainspec.MetaRun: "r", trainspec.MetaStoragePath: root}
	tg := api.NewTaskGroup(trainspec.WorkerGroup, 1)
	tg.Tasks = []*api.Task{{Name: "worker", Driver: trainspec.Driver, Config: map[string]any{
		"storage": []map[string]any{{"endpoint": o.Endpoint, "region": o.Region, "path_style": true}}}}}
	job.TaskGroups = []*api.TaskGroup{tg}
	srv.AddJob(job)
	srv.Script("r", []nomadtest.Step{nomadtest.Allocations("r", 1, 10, api.AllocClientStatusRunning, api.AllocDesiredStatusRun)})
	c, err := nomad.NewClient(nomad.Config{Address: srv.URL})
	must.NoError(t, err)
	hs := newTestServer(t, Options{Nomad: c})

	ev := openEvents(t, hs.URL, "/api/run/events?job=r")
	var u RunUpdate
	ev.next(&u)
	must.SliceLen(t, 2, u.Records)
	must.NotNil(t, u.Nomad)
	must.SliceLen(t, 1, u.Nomad.Workers)
}
