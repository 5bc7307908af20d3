package driver

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// freeAddr returns a loopback address with a port nobody listens on now,
// as Nomad's dynamic port would be.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// TestQuickstartOnFourTasks: four StartTask calls, as Nomad makes them for a
// worker group of count 4, run the quickstart's four workers through the
// plugin binary; they find each other through an embedded rendezvous store,
// authenticate with the run secret from their secrets directories, and
// train to completion.
func TestQuickstartOnFourTasks(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	emb, err := rendezvous.StartEmbedded(testCtx(t), "127.0.0.1:0", []byte(secret), hclog.NewNullLogger())
	must.NoError(t, err)
	defer emb.Close()

	n := launchPlugin(t)
	n.configure(t, ``)
	results := t.TempDir()
	var fixtures []*taskFixture
	for i := 0; i < 4; i++ {
		f := newTaskFixture(t, n, "worker", fmt.Sprintf(`
builtin      = "quickstart"
run_name     = "quickstart"
world_size   = 4
train_config = "{\"epochs\":4}"
storage_path = %q
rendezvous {
  backend = "embedded"
  address = %q
}
checkpoint {
  num_to_keep     = 2
  score_attribute = "loss"
  score_order     = "min"
}
`, results, emb.URI))
		f.cfg.Env["NOMAD_ALLOC_INDEX"] = fmt.Sprint(i)
		f.cfg.Env["NOMAD_ADDR_train"] = freeAddr(t)
		must.NoError(t, os.WriteFile(filepath.Join(f.allocDir, "worker", "secrets", "nomad-train.secret"), []byte(secret), 0o600))
		fixtures = append(fixtures, f)
	}
	var ids []string
	for _, f := range fixtures {
		ids = append(ids, n.start(t, f).GetConfig().GetId())
	}
	for i, id := range ids {
		res := n.wait(t, id)
		if res.GetResult().GetExitCode() != 0 {
			l := fixtures[i].logs
			l.mu.Lock()
			t.Logf("worker %d stderr: %s", i, l.stderr.String())
			l.mu.Unlock()
		}
		must.Eq(t, int32(0), res.GetResult().GetExitCode(), must.Sprintf("worker %d", i))
	}
	fixtures[0].logs.waitFor(t, "epoch 3: loss", "")
	for _, id := range ids {
		n.destroy(t, id)
	}

	st, err := storage.OpenReadOnly(results, "quickstart", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.SliceLen(t, 4, recs)
	must.Less(t, 0.05, recs[3].Metrics["loss"].(float64))
	_, _, ok, err := st.Latest()
	must.NoError(t, err)
	must.True(t, ok)
}

// A run marked failed for good (its training function failed, or its
// budget is spent) gets no more workers: StartTask refuses it as
// unrecoverable, so Nomad stops restarting and rescheduling.
func TestStartRefusedForFailedRun(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, ``)
	results := t.TempDir()
	must.NoError(t, storage.MarkFailed(results, "done-for", storage.Failure{Reason: "failure budget exhausted: the gang failed 3 times, max_failures is 2", ExitCode: 5}))
	f := newTaskFixture(t, n, "worker", fmt.Sprintf(`
builtin      = "quickstart"
run_name     = "done-for"
world_size   = 2
storage_path = %q
`, results))
	_, err := n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: f.cfg})
	must.ErrorContains(t, err, `run "done-for" failed for good: failure budget exhausted`)
	st := status.Convert(err)
	must.Eq(t, codes.FailedPrecondition, st.Code())
	must.SliceLen(t, 1, st.Details())
	re, ok := st.Details()[0].(*structs.RecoverableError)
	must.True(t, ok)
	must.False(t, re.GetRecoverable())
}
