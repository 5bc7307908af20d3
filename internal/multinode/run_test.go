//go:build multinode

package multinode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// TestRunOnCluster is the README's cluster path from the command line:
// `nomad-train run -address` submits the quickstart (two workers, storage
// on S3, rendezvous through each node's Consul agent), follows it to the
// end and exits 0; then status, list and logs (rank 0's output) show it. The S3 keys are
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

	out, err = b.cli(env, "logs", "-address", address, "-rank", "0", "onc")
	t.Logf("logs -rank 0:\n%s", out)
	must.NoError(t, err)
	must.StrContains(t, out, "epoch 4: loss", must.Sprint("rank 0's output, from Nomad"))
}
