package torch_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/shoenig/test/must"
)

// `nomad-train run` on a spec whose entrypoint is a python command: the
// CLI sees it is not a Go trainer binary and runs it under its own worker
// runtime, so the DDP script gets torchrun's environment and its reports
// land in the run's storage.
func TestRunCommandSpecWithPython(t *testing.T) {
	needTorch(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "nomad-train")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/nomad-train").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "train.py"), mustRead(t, "train.py"), 0o644))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "train.hcl"), []byte(`
train "torch-cli" {
  entrypoint {
    command = "`+python+`"
    args    = ["train.py"]
  }
  config = { epochs = 2 }
  scaling { num_workers = 2 }
  run { storage_path = "./results" }
}
`), 0o644))
	cmd := exec.Command(bin, "run", "train.hcl")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	out, err = cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "[rank 0] epoch 1: loss")
	must.RegexMatch(t, regexp.MustCompile(`(?m)^\s+world_size\s+2$`), string(out))
	must.FileExists(t, filepath.Join(dir, "results", "torch-cli", "progress.jsonl"), must.Sprint(string(out)))
}
