package torch_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

// The example as shipped, run from another folder (as from the
// repository's root: nomad-train run examples/torch/train.hcl): its
// python3 train.py names the script beside the spec, and the results land
// in ./results of the folder it ran from.
func TestExampleRunsFromAnotherFolder(t *testing.T) {
	needTorch(t)
	root := t.TempDir()
	bin := filepath.Join(root, "nomad-train")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/nomad-train").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	example := filepath.Join(root, "examples", "torch")
	must.NoError(t, os.MkdirAll(example, 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(example, "train.py"), mustRead(t, "train.py"), 0o644))
	spec := strings.Replace(string(mustRead(t, "train.hcl")), "epochs = 6", "epochs = 1", 1)
	must.NoError(t, os.WriteFile(filepath.Join(example, "train.hcl"), []byte(spec), 0o644))
	cmd := exec.Command(bin, "run", "examples/torch/train.hcl")
	cmd.Dir = root
	// The spec says python3: Debian's, which has torch.
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=", "PATH="+filepath.Dir(python)+":"+os.Getenv("PATH"))
	out, err = cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrNotContains(t, string(out), "can't open file")
	must.StrContains(t, string(out), "[rank 0] epoch 0: loss")
	must.FileExists(t, filepath.Join(root, "results", "torch-ddp", "progress.jsonl"), must.Sprint(string(out)))
}
