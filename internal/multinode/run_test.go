//go:build multinode

package multinode

import (
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

	"github.com/shoenig/test/must"
)

// TestRunOnCluster is the README's cluster path from the command line:
// `nomad-train run -address` submits the quickstart (two workers, storage
// on S3, rendezvous through each node's Consul agent), follows it to the
// end and exits 0; then status, list, logs (rank 0's output) and the dashboard (the run from
// S3 and its job from Nomad) show it. The S3 keys are
// in the run's Nomad Variable for the workers and in the environment of
// the CLI only.
func TestRunOnCluster(t *testing.T) {
	const clients = 2
	b := newTestBed(t, "onc", clients, false)
	spec := filepath.Join(b.base, "train.hcl")
	url := "s3://" + b.s3.Bucket + "/runs"
	must.NoError(t, os.WriteFile(spec, []byte(fmt.Sprintf(`
train "onc" {
  entrypoint { builtin = "quickstart" }
  config = {
    epochs  = 5
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
`, b.storageBlock(url))), 0o644))
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
}

// listedRun is a row of the dashboard's /api/runs.
type listedRun struct {
	Kind, Key, Name, State string
	JobID                  string `json:"job_id"`
	Step                   int64
}
