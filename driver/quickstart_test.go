package driver

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
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
	emb, n, results := newGang(t)
	fixtures := startTasks(t, n, 4, fmt.Sprintf(`
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
`, results, emb.URI), nil)
	var ids []string
	for i, f := range fixtures {
		must.Eq(t, int32(0), waitTask(t, n, f, 30*time.Second).GetResult().GetExitCode(), must.Sprintf("worker %d", i))
		ids = append(ids, f.cfg.GetId())
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

// A relative storage_path is the worker's: it runs in the task directory, so
// that is where the driver looks for the failure mark, not its own cwd.
func TestStartRefusedForFailedRunRelativeStorage(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, ``)
	f := newTaskFixture(t, n, "worker", `
builtin      = "quickstart"
run_name     = "done-for"
world_size   = 2
storage_path = "results"
`)
	results := filepath.Join(f.allocDir, "worker", "results")
	must.NoError(t, storage.MarkFailed(results, "done-for", storage.Failure{Reason: "training function failed", ExitCode: 3}))
	_, err := n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: f.cfg})
	must.ErrorContains(t, err, `run "done-for" failed for good: training function failed`)
	must.ErrorContains(t, err, filepath.Join(results, "done-for", storage.FailedFile))
	must.Eq(t, codes.FailedPrecondition, status.Code(err))
}
