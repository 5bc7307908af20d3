package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/trainspec"
)

// num_workers = 100000 is refused for a local run, at its line, with this
// machine's core count, before any worker starts; nothing is written.
func TestRunRefusesFarTooManyLocalWorkers(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "")
	dir := t.TempDir()
	t.Chdir(dir)
	path := quickstartSpec(t, dir, "huge", 1, 100000)
	code, _, errOut := runCLI(t, "run", path)
	must.Eq(t, 1, code, must.Sprint(errOut))
	must.StrContains(t, errOut, "Too many workers for this machine")
	must.StrContains(t, errOut, "huge.hcl line 5")
	must.StrContains(t, errOut, fmt.Sprintf("on %d cores", runtime.NumCPU()))
	must.StrContains(t, errOut, "-force")
	_, err := os.Stat(filepath.Join(dir, "results"))
	must.True(t, os.IsNotExist(err), must.Sprint("a refused run wrote its storage"))
}

// At the limit a local run goes ahead; -force lifts the limit.
func TestLocalWorkersLimit(t *testing.T) {
	limit := trainspec.LocalWorkerLimit(runtime.NumCPU())
	for _, tc := range []struct {
		name    string
		workers int
		force   bool
		ok      bool
	}{
		{"at the limit", limit, false, true},
		{"past it", limit + 1, false, false},
		{"past it, forced", limit + 1, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := quickstartSpec(t, dir, "lim", 1, tc.workers)
			spec, _, ok := loadSpecFor("", path, &specFlags{}, false, new(discard))
			must.True(t, ok)
			must.Eq(t, tc.ok, console.LocalWorkersOK(path, spec, tc.force, new(discard)))
		})
	}
}

type discard struct{}

func (*discard) Write(p []byte) (int, error) { return len(p), nil }

// A relative script in a command entrypoint names the file beside the
// spec, wherever nomad-train runs from: run from another folder, the
// workers find check.sh (they used to fail with "can't open file").
func TestRunCommandPathRelativeToSpec(t *testing.T) {
	bin := buildCLI(t)
	root := t.TempDir()
	specDir := filepath.Join(root, "example")
	must.NoError(t, os.Mkdir(specDir, 0o755))
	writeFile(t, specDir, "check.sh", "echo script found in $(pwd)\n")
	writeFile(t, specDir, "train.hcl", `
train "rel" {
  entrypoint {
    command = "sh"
    args    = ["check.sh"]
  }
  run {
    storage_path = "./results"
    failure { max_failures = 0 }
  }
}
`)
	cmd := exec.Command(bin, "run", "example/train.hcl")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "script found in "+specDir)
	// The storage path is still the caller's: ./results of where it ran.
	must.DirExists(t, filepath.Join(root, "results", "rel"), must.Sprint(string(out)))
}
