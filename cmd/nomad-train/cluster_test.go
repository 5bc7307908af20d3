package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// clusterFixture is a fake Nomad agent with a spec for a 2-worker run
// "fakerun" whose storage this machine shares.
type clusterFixture struct {
	srv     *nomadtest.Server
	spec    string
	storage string
}

func newClusterFixture(t *testing.T, recording string) *clusterFixture {
	t.Helper()
	dir := t.TempDir()
	f := &clusterFixture{srv: nomadtest.New(t), spec: filepath.Join(dir, "train.hcl"), storage: filepath.Join(dir, "results")}
	must.NoError(t, os.WriteFile(f.spec, []byte(fmt.Sprintf(`
train "fakerun" {
  entrypoint { builtin = "quickstart" }
  scaling { num_workers = 2 }
  run { storage_path = %q }
}
`, f.storage)), 0o644))
	if recording != "" {
		rec, err := nomadtest.LoadRecording(filepath.Join("..", "..", "scheduler", "nomad", "testdata", recording+".json"))
		must.NoError(t, err)
		f.srv.Script("fakerun", rec.Steps)
	}
	return f
}

// writeProgress puts rank 0's reports in the shared storage.
func (f *clusterFixture) writeProgress(t *testing.T, lines ...string) {
	t.Helper()
	dir := filepath.Join(f.storage, "fakerun")
	must.NoError(t, os.MkdirAll(dir, 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "progress.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
}

// addJob registers the spec's job as nomad-train would.
func (f *clusterFixture) addJob(t *testing.T) {
	t.Helper()
	job := api.NewBatchJob("fakerun", "fakerun", "", 50)
	job.Meta = map[string]string{trainspec.MetaRun: "fakerun", trainspec.MetaStoragePath: f.storage}
	job.TaskGroups = []*api.TaskGroup{api.NewTaskGroup(trainspec.WorkerGroup, 2)}
	f.srv.AddJob(job)
}

func (f *clusterFixture) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return f.cliFor(t, 30*time.Second, args...)
}

// cliFor runs the command as if Ctrl-C came after d.
func (f *clusterFixture) cliFor(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	full := append([]string{args[0], "-address", f.srv.URL}, args[1:]...)
	code := dispatch(ctx, full, &out, &errb)
	return code, out.String(), errb.String()
}

const (
	report1 = `{"step":10,"time":"2026-12-02T10:00:10Z","metrics":{"epoch":1,"loss":0.5},"generation":1,"attempt":0}`
	report2 = `{"step":20,"time":"2026-12-02T10:00:20Z","metrics":{"epoch":2,"loss":0.25},"generation":1,"attempt":0}`
)

func TestRunOnNomad(t *testing.T) {
	f := newClusterFixture(t, "gang-complete")
	// report1 is an earlier attempt's (the storage keeps the run's
	// history); the workers of this one write report2 after it starts.
	later := strings.Replace(report2, "2026-12-02T10:00:20Z", time.Now().Add(time.Minute).UTC().Format(time.RFC3339), 1)
	f.writeProgress(t, report1, later)
	code, out, errs := f.cli(t, "run", f.spec)
	must.Eq(t, 0, code, must.Sprint(out, errs))
	for _, want := range []string{
		`==> run "fakerun" on Nomad`, "job fakerun registered", "pending: 0/2 workers placed, 0 running",
		"running: 2/2 workers placed, 2 running", "complete: 2/2 workers placed, 0 running", "step 20 epoch 2 loss=0.25", `==> run "fakerun" complete (0 restarts)`,
	} {
		must.StrContains(t, out, want)
	}

	// Only an earlier attempt's reports: none is shown as this run's.
	f = newClusterFixture(t, "gang-complete")
	f.writeProgress(t, report1, report2)
	code, out, errs = f.cli(t, "run", f.spec)
	must.Eq(t, 0, code, must.Sprint(out, errs))
	must.StrNotContains(t, out, "step 20")
	must.StrNotContains(t, out, "last report")
	secret := f.srv.Variable("nomad/jobs/fakerun").Items["secret"]
	must.NotEq(t, "", secret)
	must.StrNotContains(t, out+errs, secret)
	task := f.srv.Job("fakerun").TaskGroups[0].Tasks[0]
	must.Len(t, 1, task.Templates)
}

func TestRunOnNomadRefusesPartialGang(t *testing.T) {
	f := newClusterFixture(t, "")
	f.srv.FailPlans(map[string]*api.AllocationMetric{"worker": {NodesEvaluated: 2, DimensionExhausted: map[string]int{"memory": 2}}})
	code, out, errs := f.cli(t, "run", f.spec)
	must.Eq(t, 1, code, must.Sprint(out, errs))
	must.StrContains(t, errs, "not enough capacity for the whole gang")
	must.StrContains(t, errs, `exhausted "memory" on 2`)
	must.StrContains(t, errs, "-wait-for-capacity")
	must.Nil(t, f.srv.Job("fakerun"))
}

// Nodes that lack what a worker needs (here the train driver) are no
// capacity shortage: run refuses even with -wait-for-capacity, saying what
// is missing.
func TestRunOnNomadRefusesUnplaceableGang(t *testing.T) {
	f := newClusterFixture(t, "")
	f.srv.FailPlans(map[string]*api.AllocationMetric{"worker": {NodesEvaluated: 2, NodesFiltered: 2,
		ConstraintFiltered: map[string]int{"missing drivers": 2}}})
	code, out, errs := f.cli(t, "run", "-wait-for-capacity", f.spec)
	must.Eq(t, 1, code, must.Sprint(out, errs))
	must.StrContains(t, errs, "no node of the cluster can run the gang")
	must.StrContains(t, errs, `filtered by "missing drivers" on 2`)
	must.StrContains(t, errs, `no node runs the "train" task driver`)
	must.StrContains(t, errs, "waiting would not help")
	must.StrNotContains(t, out, "waiting for capacity")
	must.Nil(t, f.srv.Job("fakerun"))
}

// A worker failing: shown as it happens, and either the run recovers
// (restart, reschedule) or it fails with the rank and exit code.
func TestRunOnNomadWorkerFailures(t *testing.T) {
	followSettle = 100 * time.Millisecond // the recordings end with a rank still running
	t.Cleanup(func() { followSettle = 10 * time.Second })
	cases := []struct {
		recording string
		code      int
		out, errs []string
	}{
		{"worker-failed", 1, []string{"worker failed: rank 0"},
			[]string{"run failed: ranks [0] will not be restarted", "(exit code 2)"}},
		{"worker-rescheduled", 0, []string{"worker failed: rank 1", "restarts: 2", "complete (2 restarts)"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.recording, func(t *testing.T) {
			f := newClusterFixture(t, tc.recording)
			code, out, errs := f.cli(t, "run", f.spec)
			must.Eq(t, tc.code, code, must.Sprint(out, errs))
			for _, w := range tc.out {
				must.StrContains(t, out, w)
			}
			for _, w := range tc.errs {
				must.StrContains(t, errs, w)
			}
		})
	}
}

// Waiting for capacity: the blocked half gang is shown, then the gang
// runs; Ctrl-C detaches and leaves the run on the cluster.
func TestRunOnNomadWaitsForCapacityThenDetaches(t *testing.T) {
	f := newClusterFixture(t, "gang-blocked")
	spec, err := os.ReadFile(f.spec)
	must.NoError(t, err)
	spec = bytes.Replace(spec, []byte("num_workers = 2"), []byte("num_workers = 4"), 1)
	must.NoError(t, os.WriteFile(f.spec, spec, 0o644))
	code, out, errs := f.cliFor(t, 2*time.Second, "run", "-wait-for-capacity", f.spec)
	must.Eq(t, 130, code, must.Sprint(out, errs))
	must.StrContains(t, out, `blocked: 2 workers not placed (4 nodes evaluated; exhausted "devices: nvidia/gpu" on 2)`)
	must.StrContains(t, out, "running: 4/4 workers placed, 4 running")
	must.StrContains(t, errs, "detached")
	stopped, _ := f.srv.Stopped("fakerun")
	must.False(t, stopped)
}

func TestStatusOnNomad(t *testing.T) {
	f := newClusterFixture(t, "worker-rescheduled")
	f.addJob(t)
	f.writeProgress(t, report1)
	f.srv.Seek("fakerun", 4)
	code, out, errs := f.cli(t, "status", "fakerun")
	must.Eq(t, 0, code, must.Sprint(out, errs))
	must.StrContains(t, out, "run fakerun: running, 2 of 2 workers, 2 restarts")
	must.StrContains(t, out, "RANK  ALLOC")
	must.RegexMatch(t, regexp.MustCompile(`(?m)^1\s+\S{8}\s+gpu-2\s+running\s+2\s+Started`), out)
	must.StrContains(t, out, "failure: rank 1")
	must.StrContains(t, out, "last report: step 10 epoch 1 loss=0.5 (generation 1, attempt 0)")

	code, _, errs = f.cli(t, "status", "nope")
	must.Eq(t, 1, code)
	must.StrContains(t, errs, "no such run")
}

func TestLogsOnNomad(t *testing.T) {
	f := newClusterFixture(t, "gang-complete")
	f.addJob(t)
	f.srv.Seek("fakerun", 2)
	rec, err := nomadtest.LoadRecording("../../scheduler/nomad/testdata/gang-complete.json")
	must.NoError(t, err)
	f.srv.SetLogs(rec.Steps[2].Allocations[1].ID, "stderr", "rank 1 says hello\n")
	code, out, errs := f.cli(t, "logs", "fakerun", "-rank", "1", "-stderr")
	must.Eq(t, 0, code, must.Sprint(errs))
	must.Eq(t, "rank 1 says hello\n", out)

	code, _, errs = f.cli(t, "logs", "fakerun", "-rank", "5")
	must.Eq(t, 1, code)
	must.StrContains(t, errs, "no worker with rank 5")
}

func TestStopAndListOnNomad(t *testing.T) {
	f := newClusterFixture(t, "gang-complete")
	f.addJob(t)
	other := api.NewServiceJob("web", "web", "", 50)
	f.srv.AddJob(other)

	code, out, _ := f.cli(t, "list")
	must.Eq(t, 0, code)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^fakerun\s+fakerun\s+pending\s+`), out, must.Sprint("registered, not placed"))
	f.srv.Seek("fakerun", 2) // its workers run
	code, out, _ = f.cli(t, "list")
	must.Eq(t, 0, code)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^fakerun\s+fakerun\s+running\s+`), out)
	must.StrNotContains(t, out, "web")

	code, out, errs := f.cli(t, "stop", "fakerun", "-purge")
	must.Eq(t, 0, code, must.Sprint(errs))
	must.StrContains(t, out, "run fakerun stopped")
	stopped, purged := f.srv.Stopped("fakerun")
	must.True(t, stopped)
	must.True(t, purged)
}

func TestClusterCommandsNeedAnAddress(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "")
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), []string{"stop", "x"}, &out, &errb)
	must.Eq(t, exitUsage, code)
	must.StrContains(t, errb.String(), "no Nomad address")
	// status without an address looks for a local run, and says both.
	errb.Reset()
	code = dispatch(context.Background(), []string{"status", "-storage", t.TempDir(), "x"}, &out, &errb)
	must.Eq(t, 1, code)
	must.StrContains(t, errb.String(), "no local run in")
	must.StrContains(t, errb.String(), "NOMAD_ADDR or -address")
}

// An address without a scheme is an agent's host:port, as in its own
// config; status with no run lists the runs, and its errors say status.
func TestAddressWithoutScheme(t *testing.T) {
	code, _, errs := runCLI(t, "status", "-address", "127.0.0.1:1")
	must.Eq(t, 1, code)
	must.StrHasPrefix(t, "nomad-train status: ", errs)
	must.StrContains(t, errs, `"http://127.0.0.1:1/v1/jobs`)
}

// TestE2ENomadQuickstart runs the quickstart on a real cluster. It needs a
// Nomad agent whose clients have nomad-driver-train, and Consul for the
// rendezvous.
func TestE2ENomadQuickstart(t *testing.T) {
	if os.Getenv("NOMAD_ADDR") == "" || os.Getenv("CONSUL_HTTP_ADDR") == "" {
		t.Skip("set NOMAD_ADDR and CONSUL_HTTP_ADDR (a cluster with nomad-driver-train installed) to run the quickstart on Nomad")
	}
	bin := buildCLI(t)
	spec, err := filepath.Abs("../../examples/quickstart/train.hcl")
	must.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, bin, "run", "-wait-for-capacity", spec)
	out, err := run.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), `==> run "quickstart" complete`)
	list, err := exec.CommandContext(ctx, bin, "list").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(list)))
	must.StrContains(t, string(list), "quickstart")
	must.StrContains(t, string(list), "complete")
	logs, err := exec.CommandContext(ctx, bin, "logs", "-rank", "0", "quickstart").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(logs)))
	must.StrContains(t, string(logs), "epoch 19: loss") // rank 0 prints every epoch
	status, err := exec.CommandContext(ctx, bin, "status", "quickstart").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(status)))
	must.StrContains(t, string(status), "run quickstart: complete")
	stop, err := exec.CommandContext(ctx, bin, "stop", "-purge", "quickstart").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(stop)))
}

func TestTokenNotInHelp(t *testing.T) {
	t.Setenv("NOMAD_TOKEN", "9f0c2c5e-token-must-stay-secret")
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), []string{"run", "-h"}, &out, &errb)
	must.Eq(t, 0, code)
	must.StrContains(t, errb.String(), "-token")
	must.StrNotContains(t, errb.String()+out.String(), "must-stay-secret")
}

func TestConnectionFlagsReachNomad(t *testing.T) {
	f := newClusterFixture(t, "gang-complete")
	f.addJob(t)
	code, _, errs := f.cli(t, "list", "-token", "tok-123", "-namespace", "ml", "-region", "eu")
	must.Eq(t, 0, code, must.Sprint(errs))
	must.True(t, f.srv.SawToken("tok-123"))
	must.True(t, f.srv.SawNamespace("ml"))
}

// status of a run on Nomad whose storage is on S3 reads its reports and
// its kept checkpoints from the bucket, with the options the job's
// storage block gives (the environment holds the keys alone), and says
// where the latest checkpoint is, for download.
func TestStatusOnNomadOfARunOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeysOnly(t)
	f := newClusterFixture(t, "worker-rescheduled")
	f.storage = "s3://" + srv.Bucket + "/runs"
	opts := workerenv.StorageOptions{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}
	w, err := storage.OpenStore(context.Background(), f.storage, "fakerun", storage.Policy{},
		storage.WithStorageOptions(opts), storage.WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	for step := range int64(2) {
		s, err := w.Stage()
		must.NoError(t, err)
		must.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "model.bin"), []byte{byte(step)}, 0o644))
		_, err = w.Commit(s, storage.Record{Step: step + 1, Metrics: map[string]any{"loss": 0.5}})
		must.NoError(t, err)
	}
	must.NoError(t, w.Close())
	job := api.NewBatchJob("fakerun", "fakerun", "", 50)
	job.Meta = map[string]string{trainspec.MetaRun: "fakerun", trainspec.MetaStoragePath: f.storage}
	task := api.NewTask("worker", trainspec.Driver)
	task.Config = map[string]any{"storage": map[string]any{"endpoint": opts.Endpoint, "region": opts.Region, "path_style": true}}
	job.TaskGroups = []*api.TaskGroup{api.NewTaskGroup(trainspec.WorkerGroup, 2).AddTask(task)}
	f.srv.AddJob(job)
	f.srv.Seek("fakerun", 4)

	code, out, errs := f.cli(t, "status", "fakerun")
	must.Eq(t, 0, code, must.Sprint(out, errs))
	must.StrContains(t, out, "last report: step 2 loss=0.5")
	must.StrContains(t, out, "checkpoints: 2 kept; the latest, of step 2: "+f.storage+"/fakerun/checkpoints/checkpoint_000001\n")
}
