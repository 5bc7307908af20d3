package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// A failed run prints its error, not a result block that reads as if it
// had finished.
func TestRunFailureShowsNoResult(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	path := writeFile(t, dir, "train.hcl", `train "fails" {
  entrypoint {
    command = "sh"
    args    = ["-c", "exit 3"]
  }
  scaling { num_workers = 1 }
  run {
    storage_path = "./results"
    failure { max_failures = 0 }
  }
}
`)
	cmd := exec.Command(bin, "run", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	exit, ok := err.(*exec.ExitError)
	must.True(t, ok, must.Sprintf("want exit status 1, got %v", err))
	must.EqOp(t, 1, exit.ExitCode())
	must.StrContains(t, stderr.String(), "nomad-train run: run failed")
	must.StrNotContains(t, stdout.String(), "==> result")
}
