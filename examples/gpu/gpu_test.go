// Package gpu_test runs examples/gpu/train.py, the PyTorch DDP script of
// the GPU example, on two local workers.
package gpu_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/external"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// python is Debian's interpreter, which python3-torch installs into.
const python = "/usr/bin/python3"

// TestGPUScriptTrains: train.py trains with NCCL on each worker's own GPU
// where CUDA is present, and otherwise says it skips the GPU path and
// trains with Gloo on the CPU; either way both epochs are reported and
// checkpointed.
func TestGPUScriptTrains(t *testing.T) {
	probe, err := exec.Command(python, "-c", "import torch, torch.distributed as d; assert d.is_gloo_available(); print(torch.cuda.is_available() and d.is_nccl_available())").CombinedOutput()
	if err != nil {
		t.Skipf("%s cannot import torch with Gloo (apt-get install python3-torch): %v: %s", python, err, probe)
	}
	cuda := strings.TrimSpace(string(probe)) == "True"
	script, err := filepath.Abs("train.py")
	must.NoError(t, err)
	argv, _ := json.Marshal([]string{python, script})
	t.Setenv(workerenv.ExternalCommand, string(argv))
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	tr := trainer.New(external.Train, trainer.Scaling{NumWorkers: 2},
		trainer.Run{Name: "gpu", StoragePath: t.TempDir()},
		map[string]any{"epochs": 2, "lr": 0.05, "batch_size": 256})
	tr.Args = []string{"-test.run=^" + t.Name() + "$"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := tr.Fit(ctx)
	t.Log(out.String())
	must.NoError(t, err)
	must.Eq(t, 1.0, res.Metrics["epoch"].(float64))
	must.NotNil(t, res.Checkpoint)
	if cuda {
		must.Eq(t, "nccl", res.Metrics["backend"].(string))
		must.StrContains(t, out.String(), "(nccl, cuda:0)")
		return
	}
	must.Eq(t, "gloo", res.Metrics["backend"].(string))
	must.StrContains(t, out.String(), "CUDA is not available: skipping the GPU path")
}
