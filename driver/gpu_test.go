package driver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// gpuScript prints what a PyTorch worker would pass to
// torch.cuda.set_device, and reports it.
const gpuScript = `import os
import nomad_train as nt
print("gpu CUDA_VISIBLE_DEVICES=%s LOCAL_RANK=%d DEVICE=%d" % (
    os.environ.get("CUDA_VISIBLE_DEVICES"), nt.local_rank(), nt.device_index()), flush=True)
nt.report({"device": nt.device_index()})
`

// TestWireGPUDeviceOnTwoTasks: two allocations on one node, each with one
// GPU of its own (Nomad's NVIDIA device plugin hands each its
// NVIDIA_VISIBLE_DEVICES). Each worker sees only its GPU, as device 0,
// while LOCAL_RANK keeps torchrun's meaning (0 and 1): nomad_train's
// device index is 0 on both, where LOCAL_RANK would have had the second
// worker set device 1 of the one it sees.
func TestWireGPUDeviceOnTwoTasks(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := exec.LookPath(python); err != nil {
		t.Skipf("%s not found: %v", python, err)
	}
	emb, n, results := newGang(t)
	gpus := []string{"GPU-aaa", "GPU-bbb"}
	next := 0
	fixtures := startTasks(t, n, 2, fmt.Sprintf(`
command      = %q
args         = ["local/gpu.py"]
run_name     = "gpu"
world_size   = 2
storage_path = %q
rendezvous {
  backend = "embedded"
  address = %q
  timeout = "20s"
}
`, python, results, emb.URI), func(f *taskFixture) {
		must.NoError(t, os.WriteFile(filepath.Join(f.allocDir, "worker", "local", "gpu.py"), []byte(gpuScript), 0o644))
		f.cfg.DeviceEnv = map[string]string{"NVIDIA_VISIBLE_DEVICES": gpus[next]}
		next++
	})
	line := regexp.MustCompile(`gpu CUDA_VISIBLE_DEVICES=(\S*) LOCAL_RANK=(\d) DEVICE=(\d)`)
	for i, f := range fixtures {
		res := waitTask(t, n, f, 30*time.Second)
		must.Eq(t, int32(0), res.GetResult().GetExitCode(), must.Sprintf("worker %d", i))
		f.logs.waitFor(t, "gpu CUDA_VISIBLE_DEVICES", "")
		f.logs.mu.Lock()
		m := line.FindStringSubmatch(f.logs.stdout.String())
		f.logs.mu.Unlock()
		must.NotNil(t, m, must.Sprintf("worker %d printed no device line", i))
		must.Eq(t, gpus[i], m[1], must.Sprint("each allocation sees its own GPU only"))
		must.Eq(t, fmt.Sprint(i), m[2], must.Sprint("LOCAL_RANK counts the workers on the node"))
		must.Eq(t, "0", m[3], must.Sprint("its own GPU is device 0"))
		n.destroy(t, f.cfg.GetId())
	}
}
