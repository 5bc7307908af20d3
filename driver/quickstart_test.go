package driver

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
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

// quickstartWorker is a task "worker" of the quickstart builtin.
func quickstartWorker(t *testing.T, n *nomadClient, run string, world int, storagePath string) *taskFixture {
	t.Helper()
	return newTaskFixture(t, n, "worker", fmt.Sprintf(`
builtin      = "quickstart"
run_name     = %q
world_size   = %d
storage_path = %q
`, run, world, storagePath))
}

// A run marked failed for good (its training function failed, or its
// budget is spent) gets no more workers: StartTask refuses it as
// unrecoverable, so Nomad stops restarting and rescheduling.
func TestStartRefusedForFailedRun(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, ``)
	results := t.TempDir()
	must.NoError(t, storage.MarkFailed(results, "done-for", storage.Failure{Reason: "failure budget exhausted: the gang failed 3 times, max_failures is 2", ExitCode: 5}))
	f := quickstartWorker(t, n, "done-for", 2, results)
	_, err := n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: f.cfg})
	must.ErrorContains(t, err, `run "done-for" failed for good: failure budget exhausted`)
	st := status.Convert(err)
	must.Eq(t, codes.FailedPrecondition, st.Code())
	must.SliceLen(t, 1, st.Details())
	re, ok := st.Details()[0].(*structs.RecoverableError)
	must.True(t, ok)
	must.False(t, re.GetRecoverable())
}

// On S3 the driver, root on the client, reads a failure mark with the
// keys the task itself gets, never with its own: the job chooses the
// bucket and the endpoint, and root may hold keys no task should lend
// (here the plugin's environment has the server's valid keys). A task
// given keys is refused as for a directory; one given none is started,
// and left to its worker, which finds the mark with whatever keys it has.
func TestStartReadsS3FailureWithTheTasksKeys(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeys(t) // the client's own keys, which the plugin inherits
	t.Setenv("AWS_REGION", srv.Region)
	root := "s3://" + srv.Bucket + "/runs"
	opts := storage.WithStorageOptions(workerenv.StorageOptions{Endpoint: srv.Endpoint, PathStyle: true})
	must.NoError(t, storage.MarkFailed(root, "done-for", storage.Failure{Reason: "training function failed", ExitCode: 3}, opts))
	n := launchPlugin(t)
	n.configure(t, ``)
	task := func(name string, env map[string]string) *drivers.TaskConfig {
		f := newTaskFixture(t, n, name, fmt.Sprintf(`
builtin      = "quickstart"
run_name     = "done-for"
world_size   = 1
storage_path = %q
storage {
  endpoint   = %q
  path_style = true
}
`, root, srv.Endpoint))
		f.cfg.Env = env
		return f.cfg
	}
	withKeys := map[string]string{"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey, "AWS_REGION": srv.Region}
	_, err := n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: task("keyed", withKeys)})
	must.ErrorContains(t, err, `run "done-for" failed for good: training function failed`)
	must.Eq(t, codes.FailedPrecondition, status.Code(err))

	bare := task("bare", map[string]string{"AWS_REGION": srv.Region})
	_, err = n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: bare})
	must.NoError(t, err, must.Sprint("the driver lent the task its own keys"))
	n.destroy(t, bare.GetId())
}

// The plugin reads a directory's failure mark as root, at a path the job
// chose: a file there that the task's user does not own (one of root's,
// say) is not this run's mark, and nothing of it is echoed.
func TestStartIgnoresAMarkNotTheTasksUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("giving the mark another owner needs root")
	}
	n := launchPlugin(t)
	n.configure(t, ``) // tasks run as the agent's user, root here
	results := t.TempDir()
	must.NoError(t, storage.MarkFailed(results, "elsewhere", storage.Failure{Reason: "not for this task's eyes", ExitCode: 3}))
	must.NoError(t, os.Chown(filepath.Join(results, "elsewhere", storage.FailedFile), 4321, 4321))
	f := quickstartWorker(t, n, "elsewhere", 1, results)
	_, err := n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: f.cfg})
	must.NoError(t, err)
	n.destroy(t, f.cfg.GetId())
}

// A mark left by an earlier attempt at a run of the same name (another
// secret: the job submitted again) does not stop this one, while one of
// this attempt does.
func TestStartIgnoresAnEarlierAttemptsFailure(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, ``)
	results := t.TempDir()
	task := func(name string) *taskFixture {
		return newTaskFixture(t, n, name, fmt.Sprintf(`
builtin      = "quickstart"
run_name     = "again"
world_size   = 1
storage_path = %q
`, results))
	}
	earlier := storage.Failure{Reason: "training function failed", ExitCode: 3, Attempt: storage.AttemptID([]byte("the secret of an earlier attempt"))}
	must.NoError(t, storage.MarkFailed(results, "again", earlier))
	f := task("worker")
	_, err := n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: f.cfg})
	must.NoError(t, err)
	n.destroy(t, f.cfg.GetId())

	mine := earlier
	mine.Attempt = storage.AttemptID([]byte(fixtureSecret))
	must.NoError(t, storage.MarkFailed(results, "again", mine))
	_, err = n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: task("worker2").cfg})
	must.ErrorContains(t, err, `run "again" failed for good: training function failed`)
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

// A worker that replaces one of a run that failed for good, in a fresh
// allocation directory where a relative storage_path holds no failure mark
// (Nomad reschedules failed allocations whatever the driver said), learns
// of the failure from the rendezvous store: it exits at once instead of
// waiting for a gang that will never form, and marks its own storage so
// that the driver refuses to start it again.
func TestReplacementOfFailedRunExitsAtOnce(t *testing.T) {
	emb, n, _ := newGang(t)
	failure := storage.Failure{Reason: "training function failed: batch_size 3 does not split evenly over 2 workers", ExitCode: 1}
	b, err := json.Marshal(failure)
	must.NoError(t, err)
	_, ok, err := emb.Store.CompareAndSet(testCtx(t), rendezvous.FailedKey("doomed"), b, 0)
	must.NoError(t, err)
	must.True(t, ok)
	f := startTasks(t, n, 1, quickstartTask(emb, "doomed", 2, "results", ""), nil)[0]
	res := waitTask(t, n, f, 30*time.Second)
	must.Eq(t, int32(4), res.GetResult().GetExitCode()) // workerenv.ExitPeerLost
	f.logs.waitFor(t, "", "the run failed for good: training function failed: batch_size 3")
	marked, failed, err := storage.FailedForGood(filepath.Join(f.allocDir, "worker", "results"), "doomed", "")
	must.NoError(t, err)
	must.True(t, failed)
	must.Eq(t, failure.Reason, marked.Reason)
	n.destroy(t, f.cfg.GetId())

	again := proto.Clone(f.cfg).(*drivers.TaskConfig)
	again.Id += "-restart"
	_, err = n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: again})
	must.ErrorContains(t, err, `run "doomed" failed for good: training function failed`)
}

// A run that fails for good with a relative storage_path, its two workers
// in their own allocation directories: the failure is marked in each
// worker's own storage (where its driver looks before a restart) and in
// the rendezvous store (where replacements look).
func TestFailureRecordedWhereEveryWorkerLooks(t *testing.T) {
	emb, n, _ := newGang(t)
	fixtures := startTasks(t, n, 2, quickstartTask(emb, "doomed", 2, "results", `{"batch_size":3}`), nil)
	for _, f := range fixtures {
		// Each worker's training function refuses the batch size
		// (workerenv.ExitUserError), unless its peer failed first while it
		// was still restoring: then it learns the run failed for good as a
		// lost peer (workerenv.ExitPeerLost). Either way it marks its storage.
		code := waitTask(t, n, f, 30*time.Second).GetResult().GetExitCode()
		must.SliceContains(t, []int32{1, 4}, code)
		_, failed, err := storage.FailedForGood(filepath.Join(f.allocDir, "worker", "results"), "doomed", "")
		must.NoError(t, err)
		must.True(t, failed, must.Sprint(f.allocDir))
		n.destroy(t, f.cfg.GetId())
	}
	v, err := emb.Store.Get(testCtx(t), rendezvous.FailedKey("doomed"))
	must.NoError(t, err)
	var f storage.Failure
	must.NoError(t, json.Unmarshal(v.Data, &f))
	must.StrContains(t, f.Reason, "batch_size 3 does not split evenly over 2 workers")
}

// Nomad stops a job's tasks with their kill_signal, SIGTERM, within their
// kill_timeout: the gang checkpoints the epoch it is in and every worker
// exits as stopped (resumable), not as failed.
func TestStopCheckpointsTheGang(t *testing.T) {
	emb, n, results := newGang(t)
	fixtures := startTasks(t, n, 2, quickstartTask(emb, "long", 2, results, `{"epochs":100000}`), nil)
	fixtures[0].logs.waitFor(t, "epoch 3: loss", "")
	var wg sync.WaitGroup
	for _, f := range fixtures {
		wg.Go(func() {
			_, err := n.driver.StopTask(testCtx(t), &drivers.StopTaskRequest{
				TaskId: f.cfg.GetId(), Signal: "SIGTERM", Timeout: durationpb.New(30 * time.Second)})
			must.NoError(t, err)
		})
	}
	wg.Wait()
	for i, f := range fixtures {
		must.Eq(t, int32(6), waitTask(t, n, f, 30*time.Second).GetResult().GetExitCode(), must.Sprintf("rank %d", i)) // workerenv.ExitStopped
		f.logs.waitFor(t, "", "nomad-train worker: stopped")
		n.destroy(t, f.cfg.GetId())
	}
	st, err := storage.OpenReadOnly(results, "long", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.Greater(t, 3, len(recs))
	must.Eq(t, recs[len(recs)-1].Checkpoint != "", true, must.Sprint("the last report before the stop has no checkpoint"))
}

// quickstartTask is the task config of one quickstart worker of run, in a
// gang of worldSize on emb, with trainConfig (JSON) when not empty.
func quickstartTask(emb *rendezvous.Embedded, run string, worldSize int, storagePath, trainConfig string) string {
	cfg := fmt.Sprintf("builtin = \"quickstart\"\nrun_name = %q\nworld_size = %d\nstorage_path = %q\n", run, worldSize, storagePath)
	if trainConfig != "" {
		cfg += fmt.Sprintf("train_config = %q\n", trainConfig)
	}
	return cfg + fmt.Sprintf("rendezvous {\n  backend = \"embedded\"\n  address = %q\n}\n", emb.URI)
}
