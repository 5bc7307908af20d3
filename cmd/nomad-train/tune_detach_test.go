package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	consul "github.com/hashicorp/consul/api"
	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/storeuri"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// tunerTask plays the Nomad client for the detached tuner's task: it
// renders the task's template into a task directory, serves the task API
// socket in its secrets directory (a proxy to the fake agent), and starts
// the task's command with the task's environment and a workload identity
// token, as Nomad would (with nomad-train where the clients have it).
type tunerTask struct {
	t       *testing.T
	bin     string
	args    []string
	env     []string
	taskDir string
}

func newTunerTask(t *testing.T, bin, agent string, job *api.Job) *tunerTask {
	t.Helper()
	task := job.TaskGroups[0].Tasks[0]
	must.EqOp(t, tune.DefaultTunerCommand, task.Config["command"].(string))
	// A short directory: a unix socket's path is at most 108 bytes.
	dir, err := os.MkdirTemp("", "nt-task")
	must.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	local, secrets := filepath.Join(dir, "local"), filepath.Join(dir, "secrets")
	must.NoError(t, os.MkdirAll(local, 0o755))
	must.NoError(t, os.MkdirAll(secrets, 0o700))
	interp := strings.NewReplacer("${NOMAD_TASK_DIR}", local, "${NOMAD_SECRETS_DIR}", secrets)
	for _, tp := range task.Templates {
		if tp.Envvars != nil && *tp.Envvars {
			// The S3 keys from a Variable: this test's own AWS_*
			// variables stand for them.
			continue
		}
		// The delimiters are in no spec: the template renders verbatim.
		must.StrNotContains(t, *tp.EmbeddedTmpl, *tp.LeftDelim)
		must.NoError(t, os.WriteFile(filepath.Join(dir, *tp.DestPath), []byte(*tp.EmbeddedTmpl), 0o644))
	}
	target, err := url.Parse(agent)
	must.NoError(t, err)
	l, err := net.Listen("unix", filepath.Join(secrets, "api.sock"))
	must.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // blocking queries the tuner gave up on when killed
	hs := &http.Server{Handler: proxy}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })

	tt := &tunerTask{t: t, bin: bin, taskDir: dir}
	for _, a := range task.Config["args"].([]any) {
		tt.args = append(tt.args, interp.Replace(a.(string)))
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOMAD_") && !strings.HasPrefix(kv, "CONSUL_") {
			tt.env = append(tt.env, kv)
		}
	}
	for k, v := range task.Env {
		tt.env = append(tt.env, k+"="+interp.Replace(v))
	}
	if task.Identity != nil && task.Identity.Env {
		tt.env = append(tt.env, "NOMAD_TOKEN=workload-identity-jwt")
	}
	// Every start of the task is in the same allocation.
	tt.env = append(tt.env, "NOMAD_ALLOC_ID=8f1e0c5a-3b4d-4e6f-9a0b-1c2d3e4f5a6b")
	return tt
}

// start starts the task's command; its output goes to the test log file.
func (tt *tunerTask) start(out *bytes.Buffer) *exec.Cmd {
	cmd := exec.Command(tt.bin, tt.args...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = tt.env, tt.taskDir, out, out
	must.NoError(tt.t, cmd.Start())
	return cmd
}

// waitFor polls cond until it holds (the test's own deadline ends it).
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// detachCrash plays a Nomad client for a detached experiment "dt" of
// three trials of three epochs, at most two at a time: `tune -detach`
// registers the tuner's job on a fake Nomad, whose node runs the trials'
// workers on this machine; the test runs the job's task (nomad-train
// tuner, reaching the fake agent through the task API socket), kills it
// once trial_0000 has ended while trial_0001's job still runs, and starts
// it again, as Nomad's restart policy would. The restarted tuner must
// resume the experiment from its state at where (read with opts) and
// adopt the trial's job: every trial's job is registered once and runs
// once to its end, having had its keys in the client's Consul agent
// cleared first, and status shows the experiment. It returns the fake
// agent, what `tune -detach` printed and how long the restarted tuner ran.
func detachCrash(t *testing.T, bin, spec, where string, opts ...storage.Option) (*nomadtest.Server, string, time.Duration) {
	t.Helper()
	srv := nomadtest.New(t)
	held := make(chan struct{}) // trial_0001 runs once closed
	workers := nomadtest.LocalWorkers(bin, []string{"worker"}, nil)
	node := nomadtest.NewNode(t, srv, func(ctx context.Context, job *api.Job) error {
		switch {
		case job.Meta[tune.MetaTuner] != "":
			<-ctx.Done() // the test runs the tuner's task itself
			return nil
		case *job.ID == "dt-trial_0001":
			select {
			case <-held:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return workers(ctx, job)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The client's Consul agent, holding what earlier attempts at the
	// trials left: the tuner clears each trial's keys before its job.
	agent := fakeconsul.New(fakeconsul.Options{})
	t.Cleanup(agent.Close)
	kv := consulKV(t, agent.Addr())
	var stale []string
	for i := range 3 {
		key := storeuri.NomadJobPrefix("", fmt.Sprintf("dt-trial_%04d", i)) + "left-by-an-earlier-attempt"
		_, err := kv.Put(&consul.KVPair{Key: key, Value: []byte("1")}, nil)
		must.NoError(t, err)
		stale = append(stale, key)
	}

	var out, errb bytes.Buffer
	code := dispatch(ctx, []string{"tune", "-detach", "-address", node.URL, "-tuner-consul-address", agent.Addr(), spec}, &out, &errb)
	must.EqOp(t, 0, code, must.Sprint(out.String(), errb.String()))
	must.StrContains(t, out.String(), `==> tune "dt" detached: job dt-tuner`)
	detached := out.String()
	job := srv.Job("dt-tuner")
	must.NotNil(t, job)
	task := newTunerTask(t, bin, node.URL, job)

	var log1 bytes.Buffer
	first := task.start(&log1)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("first tuner:\n%s", log1.String())
		}
	})
	waitFor(t, ctx, "trial_0000 to end and trial_0001 to run", func() bool {
		st, ok, err := tune.LoadState(ctx, where, opts...)
		return err == nil && ok && len(st.Trials) == 3 && st.Trials[0].Status == tune.StatusTerminated &&
			st.Trials[1].Status == tune.StatusRunning && srv.Job("dt-trial_0001") != nil
	})
	must.NoError(t, first.Process.Kill()) // the tuner crashes, or its node is lost
	_ = first.Wait()

	var log2 bytes.Buffer
	restarted := time.Now()
	second := task.start(&log2)
	close(held)
	err := second.Wait()
	ran := time.Since(restarted)
	must.NoError(t, err, must.Sprintf("the restarted tuner:\n%s", log2.String()))
	must.StrContains(t, log2.String(), "3 TERMINATED")
	// Its log, on the task's stderr, says what it found of the trials.
	must.StrContains(t, log2.String(), "adopting the trial's running job: trial=trial_0001")

	st, ok, err := tune.LoadState(ctx, where, opts...)
	must.NoError(t, err)
	must.True(t, ok)
	for _, tr := range st.Trials {
		must.EqOp(t, tune.StatusTerminated, tr.Status, must.Sprintf("%s: %s", tr.ID, tr.Reason))
		must.EqOp(t, 3, tr.Iterations, must.Sprint(tr.ID))
		r, err := storage.OpenStoreReadOnly(ctx, where, tr.ID, storage.Policy{}, opts...)
		must.NoError(t, err)
		recs, err := r.Records()
		must.NoError(t, err)
		must.NoError(t, r.Close())
		must.SliceLen(t, 3, recs, must.Sprintf("%s ran more than once", tr.ID))
	}
	registered := srv.Registered()
	slices.Sort(registered)
	must.Eq(t, []string{"dt-trial_0000", "dt-trial_0001", "dt-trial_0002", "dt-tuner"}, registered,
		must.Sprintf("the tuner's job and each trial's once; the restarted tuner:\n%s\nfailed runs: %q\nrequests: %q",
			log2.String(), node.Failures(), srv.Requests()))
	for _, key := range stale {
		_, found := agent.KV(key)
		must.False(t, found, must.Sprintf("%s: the tuner did not clear the trial's keys", key))
	}
	must.True(t, srv.SawToken("workload-identity-jwt"), must.Sprint("the tuner authenticates with its workload identity"))

	out.Reset()
	code = dispatch(ctx, []string{"status", "-address", node.URL, "dt"}, &out, &errb)
	must.EqOp(t, 0, code, must.Sprint(out.String(), errb.String()))
	must.StrContains(t, out.String(), "experiment dt: tuner job dt-tuner running")
	must.StrContains(t, out.String(), "== dt: 3 trials (3 TERMINATED)")
	return srv, detached, ran
}

const detachSpecTail = `
  config = {
    lr      = grid_search([0.1, 0.05, 0.02])
    epochs  = 3
    samples = 200
  }
  tune {
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
  }
}
`

// A detached experiment in a directory the clients share survives its
// tuner's crash (detachCrash).
func TestTuneDetachSurvivesTunerCrash(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared")
	_, spec := hclSpec(t, fmt.Sprintf(`train "dt" {
  entrypoint { builtin = "quickstart" }
  run { storage_path = %q }`, shared)+detachSpecTail)
	srv, _, _ := detachCrash(t, bin, spec, filepath.Join(shared, "dt"))
	job := srv.Job("dt-tuner")
	must.Eq(t, []any{"tuner", "${NOMAD_TASK_DIR}/train.hcl"}, job.TaskGroups[0].Tasks[0].Config["args"].([]any))
	must.SliceLen(t, 1, job.TaskGroups[0].Tasks[0].VolumeMounts, must.Sprint("the shared directory, mounted"))
	must.FileExists(t, filepath.Join(shared, "dt", "results.csv"))
}

// The same crash with the experiment on S3: the tuner's job mounts no
// volume and reads the store's keys as the trials' workers do; the
// experiment's state, its results and the trials' runs are all in the
// bucket, and nothing of the experiment is written on the machine. The
// restarted tuner (a new process in the same allocation) takes the
// killed one's lease at once; status reads the state from S3 too.
func TestTuneDetachOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeys(t)
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	bin := buildCLI(t)
	url := "s3://" + srv.Bucket + "/runs"
	dir, spec := hclSpec(t, fmt.Sprintf(`train "dt" {
  entrypoint { builtin = "quickstart" }
  run {
%s  }`, s3StorageBlock(srv, url))+detachSpecTail)
	opts := []storage.Option{storage.WithStorageOptions(workerenv.StorageOptions{
		Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true})}
	fake, out, ran := detachCrash(t, bin, spec, url+"/dt", opts...)
	t.Logf("restarted tuner ran %v", ran)
	must.Less(t, storage.DefaultLeaseTTL/2, ran, must.Sprint("the restarted tuner did not wait for the lease (20-30 s left of it)"))
	must.StrContains(t, out, "storage "+url+"/dt")
	job := fake.Job("dt-tuner")
	must.MapEmpty(t, job.TaskGroups[0].Volumes, must.Sprint("no shared directory to mount"))
	task := job.TaskGroups[0].Tasks[0]
	must.SliceLen(t, 2, task.Templates)
	must.EqOp(t, trainspec.S3CredentialsFile, *task.Templates[1].DestPath)
	must.True(t, *task.Templates[1].Envvars)

	_, err := srv.Client(t).HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &srv.Bucket, Key: new("runs/dt/results.csv")})
	must.NoError(t, err, must.Sprint("results.csv beside the state"))
	local, _ := filepath.Glob(filepath.Join(dir, "*"))
	must.Eq(t, []string{spec}, local, must.Sprint("nothing of the experiment on this machine"))
}

// -detach needs a cluster to detach to, and variables it can carry there.
func TestTuneDetachRefuses(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "train.hcl")
	must.NoError(t, os.WriteFile(spec, []byte(fmt.Sprintf(`
train "dt" {
  entrypoint { builtin = "quickstart" }
  config = { lr = grid_search([0.1]) }
  run { storage_path = %q }
  tune {
    metric = "loss"
    mode   = "min"
  }
}
`, filepath.Join(dir, "shared"))), 0o644))
	vars := filepath.Join(dir, "vars.hcl")
	must.NoError(t, os.WriteFile(vars, nil, 0o644))
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no address", []string{"tune", "-detach", "-local", spec}, "give -address or set NOMAD_ADDR"},
		{"a var file", []string{"tune", "-detach", "-address", "http://127.0.0.1:1", "-var-file", vars, spec}, "not -var-file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := dispatch(context.Background(), c.args, &out, &errb)
			must.EqOp(t, exitUsage, code, must.Sprint(errb.String()))
			must.StrContains(t, errb.String(), c.want)
		})
	}
}

// consulKV is a KV client of the Consul agent at addr.
func consulKV(t *testing.T, addr string) *consul.KV {
	t.Helper()
	c, err := consul.NewClient(&consul.Config{Address: addr})
	must.NoError(t, err)
	return c.KV()
}

// A tuner that cannot reach Nomad exits with an error that says so (and,
// for a task API socket whose path is too long to exist, why), leaving
// the experiment untouched for the restart, rather than failing its trials.
func TestTunerWithoutNomadLeavesTheTrials(t *testing.T) {
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared")
	_, spec := hclSpec(t, fmt.Sprintf(`train "dt" {
  entrypoint { builtin = "quickstart" }
  run { storage_path = %q }`, shared)+detachSpecTail)
	long := "/" + strings.Repeat("d", 100) + "/secrets/api.sock"
	for _, c := range []struct {
		name, addr, hint string
	}{
		{"no socket", "unix://" + filepath.Join(dir, "api.sock"), ""},
		{"a socket path too long", "unix://" + long, "is 118 bytes: a unix socket's is at most 107"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("NOMAD_ADDR", c.addr)
			var out, errb bytes.Buffer
			code := dispatch(context.Background(), []string{"tuner", spec}, &out, &errb)
			must.EqOp(t, 1, code, must.Sprint(out.String(), errb.String()))
			must.StrContains(t, errb.String(), "nomad-train tuner: reaching Nomad")
			if c.hint != "" {
				must.StrContains(t, errb.String(), c.hint)
			} else {
				must.StrNotContains(t, errb.String(), "unix socket's")
			}
			_, ok, err := tune.LoadState(context.Background(), filepath.Join(shared, "dt"))
			must.NoError(t, err)
			must.False(t, ok, must.Sprint("no trial was started, nor failed"))
		})
	}
}
