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
	python, dir := helperDir(t)
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

// config() is train.hcl's config block as a dict, a copy each call, and
// run_name() the run's name; both empty outside nomad-train, and a config
// that is not a JSON object is an error that says so.
func TestConfigAndRunName(t *testing.T) {
	python, dir := helperDir(t)
	script := `import nomad_train as n
c = n.config()
c["lr"] = 0
print(repr(n.config()), repr(n.run_name()))`
	cases := []struct {
		name, want string
		env        []string
	}{
		{"a trial", "{'lr': 0.01, 'layers': [64, 32]} 'trial_0003'",
			[]string{`NOMAD_TRAIN_CONFIG={"lr": 0.01, "layers": [64, 32]}`, "NOMAD_TRAIN_RUN=trial_0003"}},
		{"outside any launcher", "{} ''", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(python, "-c", script)
			cmd.Env = append([]string{"PYTHONPATH=" + dir, "PATH=" + os.Getenv("PATH")}, tc.env...)
			out, err := cmd.CombinedOutput()
			must.NoError(t, err, must.Sprint(string(out)))
			must.EqOp(t, tc.want, strings.TrimSpace(string(out)))
		})
	}
	for env, want := range map[string]string{
		"NOMAD_TRAIN_CONFIG={lr": "NOMAD_TRAIN_CONFIG is not JSON",
		"NOMAD_TRAIN_CONFIG=[1]": "NOMAD_TRAIN_CONFIG holds a list, not an object",
	} {
		cmd := exec.Command(python, "-c", "import nomad_train as n; n.config()")
		cmd.Env = []string{"PYTHONPATH=" + dir, "PATH=" + os.Getenv("PATH"), env}
		out, err := cmd.CombinedOutput()
		must.Error(t, err)
		must.StrContains(t, string(out), "nomad_train.NomadTrainError: "+want)
	}
}

// helperDir returns Debian's python3 and a directory holding the helper,
// for PYTHONPATH; the test is skipped without python3.
func helperDir(t *testing.T) (python, dir string) {
	t.Helper()
	python = "/usr/bin/python3"
	if _, err := exec.LookPath(python); err != nil {
		t.Skipf("%s not found: %v", python, err)
	}
	dir = t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(dir, HelperName), Helper(), 0o644))
	return python, dir
}
