package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/launch"
)

// A finished run run again says it is complete and starts no worker; a
// changed num_workers is reported; -fresh moves the old run aside and
// starts over.
func TestRunFinishedFreshAndWorkersChange(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append([]string{"run"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	spec := quickstartSpec(t, dir, "short", 2, 1)
	code, out := run(spec)
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "[rank 0] epoch 0")

	code, out = run(spec)
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, `run "short" is complete`)
	must.StrNotContains(t, out, "[rank 0]")

	spec = quickstartSpec(t, dir, "short", 2, 2)
	code, out = run(spec)
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "num_workers changed since the last run (1 → 2)")

	code, out = run("-fresh", spec)
	must.Eq(t, 0, code, must.Sprint(out))
	m := regexp.MustCompile(`the previous run moved to (\S+)`).FindStringSubmatch(out)
	must.SliceLen(t, 2, m, must.Sprint(out))
	must.FileExists(t, filepath.Join(m[1], launch.LastConfigFile))
	must.StrContains(t, out, "[rank 0] epoch 0")
	must.StrNotContains(t, out, "resuming")
	must.StrNotContains(t, out, "is complete")
}
