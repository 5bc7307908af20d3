//go:build multinode

package multinode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/shoenig/test/must"
)

// TestRunOnCluster is the README's cluster path from the command line:
// `nomad-train run -address` submits the quickstart (two workers, storage
// on S3, rendezvous through each node's Consul agent), follows it to the
// end and exits 0; then status, list, logs (rank 0's output) and the dashboard (the run from
// S3 and its job from Nomad) show it. The S3 keys are
// in the run's Nomad Variable for the workers and in the environment of
// the CLI only. Then a new run starts from the run's latest checkpoint on
// S3 (checkpoint { resume_from }), and another trains through a 10 s
// outage of the S3 server. Last, a longer run is stopped while followed,
// and run again: it resumes from its latest checkpoint on S3.
func TestRunOnCluster(t *testing.T) {
	const clients = 2
	b := newTestBed(t, clients, false)
	b.putKeys(t, "onc")
	url := "s3://" + b.s3.Bucket + "/runs"
	spec := b.quickstart(t, "onc", 5, url)
	address := "http://" + b.c.server.http
	env := []string{"AWS_ACCESS_KEY_ID=" + b.s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + b.s3.SecretKey,
		"CONSUL_HTTP_ADDR=" + b.consul.clients[clientName(1)]}
	out, err := b.cli(env, "run", "-address", address, spec)
	t.Logf("run -address:\n%s", out)
	must.NoError(t, err)
	must.StrContains(t, out, `==> run "onc" complete (0 restarts)`)
	must.StrContains(t, out, "step 5 epoch 4")

	out, err = b.cli(env, "status", "-address", address, "onc")
	t.Logf("status:\n%s", out)
	must.NoError(t, err)
	must.StrContains(t, out, "run onc:")
	for i := 1; i <= clients; i++ {
		must.StrContains(t, out, clientName(i), must.Sprint("SPREAD: a worker on each client"))
	}
	must.StrContains(t, out, "last report:")
	must.StrContains(t, out, "; the latest, of step 5: "+url+"/onc/checkpoints/checkpoint_", must.Sprint("where download finds it"))

	out, err = b.cli(env, "list", "-address", address)
	must.NoError(t, err, must.Sprint(out))
	must.True(t, strings.Contains(out, "onc") && strings.Contains(out, url), must.Sprint(out))

	// The dashboard lists the run from S3 and its job from Nomad.
	port := freePort(t)
	dash := exec.Command(b.bins.cli, "dashboard", "-listen", fmt.Sprintf("127.0.0.1:%d", port), "-address", address, url)
	// As the README has it: credentials, region and endpoint from the
	// AWS environment.
	dash.Env = append(os.Environ(), append(env, "AWS_REGION="+b.s3.Region, "AWS_ENDPOINT_URL_S3="+b.s3.Endpoint)...)
	dash.Stdout, dash.Stderr = os.Stderr, os.Stderr
	must.NoError(t, dash.Start())
	t.Cleanup(func() { _ = dash.Process.Kill(); _ = dash.Wait() })
	var runs []listedRun
	waitFor(t, 30*time.Second, "the dashboard to list the run", func() (bool, error) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/runs", port))
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		runs = nil
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&runs) == nil && len(runs) >= 2, nil
	})
	t.Logf("dashboard /api/runs: %+v", runs)
	must.True(t, slices.ContainsFunc(runs, func(r listedRun) bool {
		return r.Kind == "run" && r.Key == "onc" && r.Step == 5
	}), must.Sprint("the run from S3, at its last step"))
	must.True(t, slices.ContainsFunc(runs, func(r listedRun) bool {
		return r.Kind == "nomad" && r.JobID == "onc"
	}), must.Sprint("the run's job from Nomad"))

	out, err = b.cli(env, "logs", "-address", address, "-rank", "0", "onc")
	t.Logf("logs -rank 0:\n%s", out)
	must.NoError(t, err)
	must.StrContains(t, out, "epoch 4: loss", must.Sprint("rank 0's output, from Nomad"))

	t.Run("start from its checkpoint", func(t *testing.T) { startFrom(t, b, env, url, "onc") })
	t.Run("through an S3 outage", func(t *testing.T) { throughOutage(t, b, env, url) })
	t.Run("stop and run again", func(t *testing.T) { stopAndResume(t, b, env) })
}

// throughOutage kills the S3 server for 10 s while a run on the cluster
// trains, and starts it again on the same data: the workers, started by
// the train driver, retry their requests until it is back, and the run
// ends with no restart and every step recorded once.
func throughOutage(t *testing.T, b *testBed, env []string, url string) {
	const epochs = 400
	b.putKeys(t, "outage")
	spec := b.quickstart(t, "outage", epochs, url)
	address := "http://" + b.c.server.http
	followed, exited := b.follow(t, env, address, spec)
	records := func() []storage.Record { return b.records(url, "outage") }
	waitFor(t, 2*time.Minute, "the run to pass step 5", func() (bool, error) {
		recs := records()
		return len(recs) > 0 && recs[len(recs)-1].Step >= 5, nil
	})
	before := records()
	down := time.Now()
	b.s3.Outage(t, 10*time.Second)
	t.Logf("S3 DOWN for %v, from the run's step %d", time.Since(down).Round(time.Millisecond), before[len(before)-1].Step)
	select {
	case err := <-exited:
		t.Fatalf("the run ended (%v) before the server came back: no outage to ride out\n%s", err, followed.String())
	default:
	}
	select {
	case err := <-exited:
		t.Logf("run -address:\n%s", followed.String())
		must.NoError(t, err)
	case <-time.After(3 * time.Minute):
		t.Fatalf("run -address did not end:\n%s", followed.String())
	}
	must.StrContains(t, followed.String(), `==> run "outage" complete (0 restarts)`)
	recs := records()
	must.SliceLen(t, epochs, recs)
	for i, r := range recs {
		must.EqOp(t, int64(i+1), r.Step, must.Sprint("every step once, in order"))
	}
	t.Logf("THROUGH THE OUTAGE: %d steps, 0 restarts", len(recs))
}

// startFrom runs a new run on the cluster that starts from the latest
// checkpoint of run from on S3 (checkpoint { resume_from }): through the
// compiled job, the train driver and the workers' S3 keys, each node
// fetches it, and the new run trains only the epochs after it.
func startFrom(t *testing.T, b *testBed, env []string, url, from string) {
	src := b.records(url, from)
	must.SliceNotEmpty(t, src)
	last := src[len(src)-1]
	must.NotEq(t, "", last.Checkpoint)
	location := storage.CheckpointLocation(url, from, last.Checkpoint)

	b.putKeys(t, "ft")
	spec := b.quickstart(t, "ft", 8, url)
	text, err := os.ReadFile(spec)
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(spec, []byte(strings.Replace(string(text), "  run {\n",
		fmt.Sprintf("  run {\n    checkpoint { resume_from = %q }\n", location), 1)), 0o644))
	address := "http://" + b.c.server.http
	out, err := b.cli(env, "run", "-address", address, spec)
	t.Logf("run -address, starting from %s:\n%s", location, out)
	must.NoError(t, err)
	must.StrContains(t, out, `==> run "ft" complete (0 restarts)`)
	recs := b.records(url, "ft")
	must.SliceLen(t, 3, recs, must.Sprint("epochs 5 to 7, after the checkpoint of epoch 4"))
	must.EqOp(t, 4.0+3, recs[len(recs)-1].Metrics["epoch"])
	out, err = b.cli(env, "logs", "-address", address, "-rank", "0", "ft")
	must.NoError(t, err, must.Sprint(out))
	must.StrContains(t, out, "resuming after epoch 4 from ")
	out, err = b.cli(env, "status", "-address", address, "ft")
	must.NoError(t, err, must.Sprint(out))
	must.StrContains(t, out, fmt.Sprintf("started from: %s (step %d)\n", location, last.Step))
	t.Logf("STARTED FROM %s: %d reports, the last of epoch %v", location, len(recs), recs[len(recs)-1].Metrics["epoch"])
}

// stopAndResume stops a run on the cluster while its `run -address`
// follows it, then runs it again: the second attempt resumes from the
// latest checkpoint on S3 and ends where the run is meant to.
func stopAndResume(t *testing.T, b *testBed, env []string) {
	const epochs = 3000 // long enough that the stop lands mid-run
	b.putKeys(t, "long")
	url := "s3://" + b.s3.Bucket + "/runs"
	spec := b.quickstart(t, "long", epochs, url)
	address := "http://" + b.c.server.http
	followed, exited := b.follow(t, env, address, spec)
	records := func() []storage.Record { return b.records(url, "long") }
	waitFor(t, 2*time.Minute, "the run to pass step 5", func() (bool, error) {
		recs := records()
		return len(recs) > 0 && recs[len(recs)-1].Step >= 5, nil
	})
	out, err := b.cli(env, "stop", "-address", address, "long")
	must.NoError(t, err, must.Sprint(out))
	must.StrContains(t, out, "run long stopped")
	select {
	case err := <-exited:
		t.Logf("the following run -address ended (%v):\n%s", err, followed.String())
	case <-time.After(time.Minute):
		t.Fatalf("run -address went on following a stopped run:\n%s", followed.String())
	}
	waitFor(t, time.Minute, "the stopped run's workers to end", func() (bool, error) {
		return len(live(t, b.c, "long")) == 0, nil
	})
	stopped := time.Now() // every report of the first run is older
	before := records()
	var last storage.Record
	for _, r := range before {
		if r.Checkpoint != "" {
			last = r
		}
	}
	must.NotEq(t, "", last.Checkpoint, must.Sprint("a checkpoint before the stop"))
	must.Less(t, int64(epochs), last.Step, must.Sprint("stopped before the end"))
	t.Logf("STOPPED at step %d, the latest checkpoint %s at step %d", before[len(before)-1].Step, last.Checkpoint, last.Step)

	out, err = b.cli(env, "run", "-address", address, spec)
	t.Logf("run -address again:\n%s", out)
	must.NoError(t, err)
	must.StrContains(t, out, `==> run "long" complete`)
	after := records()
	must.EqOp(t, int64(epochs), after[len(after)-1].Step)
	i := slices.IndexFunc(after, func(r storage.Record) bool { return r.Time.After(stopped) })
	must.Positive(t, i+1, must.Sprint("a report after the stop"))
	must.EqOp(t, last.Step+1, after[i].Step, must.Sprint("the second run goes on from the step after the latest checkpoint"))
	must.EqOp(t, before[len(before)-1].Attempt+1, after[i].Attempt, must.Sprint("its reports say it is the run's next start"))
	for j, r := range after[1:] {
		must.Less(t, r.Step, after[j].Step, must.Sprint("one history, its steps in order"))
	}
	t.Logf("RESUMED: the first report after the stop is step %d; the run ends at step %d", after[i].Step, after[len(after)-1].Step)
}

// follow starts `run -address` of spec, as a person following the run
// does, and returns its output and its end.
func (b *testBed) follow(t *testing.T, env []string, address, spec string) (*bytes.Buffer, <-chan error) {
	t.Helper()
	cmd := exec.Command(b.bins.cli, "run", "-address", address, spec)
	cmd.Dir, cmd.Env = b.base, append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	must.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return &out, exited
}

// records reads run's records on the bed's S3 server at url (nil when
// the run has none yet, or the server does not answer).
func (b *testBed) records(url, run string) []storage.Record {
	st, err := storage.OpenStoreReadOnly(context.Background(), url, run, storage.Policy{},
		storage.WithStorageOptions(workerenv.StorageOptions{Endpoint: b.s3.Endpoint, Region: b.s3.Region, PathStyle: true}),
		storage.WithTaskEnviron([]string{"AWS_ACCESS_KEY_ID=" + b.s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + b.s3.SecretKey}))
	if err != nil {
		return nil
	}
	defer st.Close()
	recs, _ := st.Records()
	return recs
}

// quickstart writes a spec of the quickstart named name for the bed: two
// workers spread over the clients, epochs epochs, storage on S3 at url,
// rendezvous through Consul.
func (b *testBed) quickstart(t *testing.T, name string, epochs int, url string) string {
	t.Helper()
	spec := filepath.Join(b.base, name+".hcl")
	must.NoError(t, os.WriteFile(spec, []byte(fmt.Sprintf(`
train %q {
  entrypoint { builtin = "quickstart" }
  config = {
    epochs  = %d
    samples = 800
  }
  scaling {
    num_workers        = 2
    placement_strategy = "SPREAD"
    resources_per_worker {
      cpu    = 100
      memory = 128
    }
  }
  rendezvous { backend = "consul" }
  run {
%s  }
}
`, name, epochs, b.storageBlock(url))), 0o644))
	return spec
}

// listedRun is a row of the dashboard's /api/runs.
type listedRun struct {
	Kind, Key, Name, State string
	JobID                  string `json:"job_id"`
	Step                   int64
}
