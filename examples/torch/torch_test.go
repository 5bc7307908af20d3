package torch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/external"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// python is Debian's interpreter, which python3-torch installs into.
const python = "/usr/bin/python3"

func needTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import torch, torch.distributed as d; assert d.is_gloo_available()").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch with Gloo (apt-get install python3-torch): %v: %s", python, err, out)
	}
}

type config struct {
	Epochs     int     `json:"epochs"`
	LR         float64 `json:"lr"`
	DieAtEpoch int     `json:"die_at_epoch"`
	DieRank    int     `json:"die_rank"`
}

// Two PyTorch DDP workers (Gloo) run under the Go runtime: they get
// torchrun's environment from our rendezvous, train, report every epoch
// and checkpoint. Rank 1 kills itself (SIGKILL) in epoch 2 of the first
// attempt; the gang restarts in generation 2 from the epoch-1 checkpoint
// and finishes, and the run's history reads as if it had never failed.
// On Nomad rank 0's torch store listens on the task's own port each
// generation (workerenv.TorchPort), which the restarted command binds
// again; locally on a port found free each time.
//
// On S3 the ranks upload their own checkpoint files and the restarted gang
// downloads the epoch-1 checkpoint; the Result's checkpoint copies out.
func TestTorchDDPTrainsReportsAndResumesAfterKill(t *testing.T) {
	needTorch(t)
	t.Run("free port", func(t *testing.T) { torchResumesAfterKill(t, t.TempDir()) })
	t.Run("nomad port", func(t *testing.T) {
		if !workerenv.IsWorker() {
			port, err := external.FreePort()
			must.NoError(t, err)
			t.Setenv(workerenv.TorchPort, strconv.Itoa(port))
		}
		torchResumesAfterKill(t, t.TempDir())
	})
	t.Run("s3", func(t *testing.T) {
		root := "" // the workers take the run from their environment
		if !workerenv.IsWorker() {
			srv := s3test.Start(t)
			srv.SetKeys(t)
			t.Setenv("AWS_REGION", srv.Region)
			t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
			root = "s3://" + srv.Bucket + "/runs"
		}
		torchResumesAfterKill(t, root)
	})
}

func torchResumesAfterKill(t *testing.T, root string) {
	script, err := filepath.Abs("train.py")
	must.NoError(t, err)
	argv, _ := json.Marshal([]string{python, script})
	t.Setenv(workerenv.ExternalCommand, string(argv))
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	tr := trainer.New(external.Train, trainer.Scaling{NumWorkers: 2},
		trainer.Run{Name: "torch", StoragePath: root,
			Checkpoint: trainer.CheckpointConfig{NumToKeep: 2},
			Failure:    trainer.FailureConfig{MaxFailures: 2}},
		config{Epochs: 5, LR: 0.05, DieAtEpoch: 2, DieRank: 1})
	tr.Args = []string{"-test.run=^" + t.Name() + "$"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := tr.Fit(ctx)
	t.Log(out.String())
	must.NoError(t, err)

	must.StrContains(t, out.String(), "[rank 0] epoch 1: loss")
	must.StrContains(t, out.String(), "[rank 0] resuming after epoch 1 (restart 1)")
	must.StrContains(t, out.String(), "[rank 0] epoch 4: loss")
	must.Eq(t, 4.0, res.Metrics["epoch"].(float64))
	must.Eq(t, 1.0, res.Metrics["restart_count"].(float64))
	must.Less(t, 0.01, res.Metrics["loss"].(float64))
	must.NotNil(t, res.Checkpoint)
	local := filepath.Join(t.TempDir(), "model")
	must.NoError(t, res.Checkpoint.ToDirectory(ctx, local))
	must.FileExists(t, filepath.Join(local, "model.pt"))

	st, err := storage.OpenStoreReadOnly(ctx, root, "torch", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	st.Close()
	must.NoError(t, err)
	must.Len(t, 5, recs)
	for i, r := range recs {
		must.Eq(t, float64(i), r.Metrics["epoch"].(float64))
	}
	must.Eq(t, uint64(2), recs[4].Generation)
}

// Outside nomad-train the helper degrades: reports go to stderr and
// checkpoints to a temporary directory, so the script runs under plain
// torchrun or python too.
func TestHelperWithoutRuntime(t *testing.T) {
	needTorch(t)
	helperDir := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(helperDir, "nomad_train.py"), mustRead(t, "../../python/nomad_train.py"), 0o644))
	cmd := exec.Command(python, "-c", `import nomad_train as n, os
d = n.checkpoint_dir(); assert os.path.isdir(d)
assert n.report({"x": 1}, checkpoint=d) == d
assert n.latest_checkpoint() is None and n.rank() == 0 and n.world_size() == 1`)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+helperDir)
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), `"report": {"x": 1}`)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must.NoError(t, err)
	return b
}
