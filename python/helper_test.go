package python

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// device_index is the worker's first GPU among those it sees: 0 on Nomad
// (the driver narrows CUDA_VISIBLE_DEVICES to the allocation's GPUs and
// says so), LOCAL_RANK where workers share a machine's GPUs.
func TestDeviceIndex(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := exec.LookPath(python); err != nil {
		t.Skipf("%s not found: %v", python, err)
	}
	dir := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(dir, HelperName), Helper(), 0o644))
	cases := []struct {
		name string
		env  []string
		want string
	}{
		{"Nomad allocation, second worker on the node", []string{"LOCAL_RANK=1", "CUDA_VISIBLE_DEVICES=GPU-b", "NOMAD_TRAIN_LOCAL_DEVICE=0"}, "0"},
		{"shared machine (local run, torchrun)", []string{"LOCAL_RANK=1"}, "1"},
		{"outside any launcher", nil, "0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(python, "-c", "import nomad_train as n; print(n.device_index()); print(n.should_checkpoint())")
			cmd.Env = append([]string{"PYTHONPATH=" + dir, "PATH=" + os.Getenv("PATH")}, tc.env...)
			out, err := cmd.CombinedOutput()
			must.NoError(t, err, must.Sprint(string(out)))
			must.Eq(t, []string{tc.want, "False"}, strings.Fields(string(out)))
		})
	}
}
