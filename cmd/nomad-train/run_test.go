package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/builtins"
	trainhcl "github.com/nomad-train/nomad-train/hcl"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// buildCLI builds nomad-train once per test into a temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nomad-train")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	return bin
}

// The README's main command: the quickstart spec trains on 4 local workers.
func TestRunQuickstartSpec(t *testing.T) {
	bin := buildCLI(t)
	spec, err := filepath.Abs("../../examples/quickstart/train.hcl")
	must.NoError(t, err)
	cmd := exec.Command(bin, "run", spec)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	text := string(out)
	must.StrContains(t, text, "[rank 0] epoch 0: loss")
	// Warnings about compiling for Nomad do not concern a local run.
	must.StrNotContains(t, text, "on Nomad")
	m := regexp.MustCompile(`(?m)^\s+loss\s+(\S+)$`).FindStringSubmatch(text)
	must.SliceLen(t, 2, m, must.Sprint(text))
	loss, err := strconv.ParseFloat(m[1], 64)
	must.NoError(t, err)
	must.Less(t, 0.05, loss)
	must.DirExists(t, filepath.Join(cmd.Dir, "results", "quickstart"))
}

// Ctrl-C stops every worker and the run ends with 130, leaving no process
// and a checkpoint of where it stopped (the workers stop between steps).
func TestRunInterrupted(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "long.hcl")
	must.NoError(t, os.WriteFile(spec, []byte(`
train "long" {
  entrypoint { builtin = "quickstart" }
  config = { epochs = 100000 }
  scaling { num_workers = 4 }
  run { storage_path = "./results" }
}
`), 0o644))
	cmd := exec.Command(bin, "run", spec)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	stdout, err := cmd.StdoutPipe()
	must.NoError(t, err)
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	must.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), "epoch 1: loss") {
			break
		}
	}
	must.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	go func() {
		for sc.Scan() {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("run did not stop after SIGINT:\n%s\n%s", strings.Join(seen, "\n"), errBuf.String())
	}
	must.Error(t, err)
	must.Eq(t, 130, cmd.ProcessState.ExitCode(), must.Sprint(errBuf.String()))
	st, err := storage.OpenReadOnly(filepath.Join(dir, "results"), "long", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.SliceNotEmpty(t, recs)
	must.NotEq(t, "", recs[len(recs)-1].Checkpoint, must.Sprint("no checkpoint at the stop\n", errBuf.String()))
	// Each worker checkpointed and stopped; none was cut off mid-step.
	for rank := range 4 {
		must.StrContains(t, errBuf.String(), fmt.Sprintf("[rank %d] nomad-train worker: stopped\n", rank))
	}
	// No worker (a copy of bin) is left.
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		if target, err := os.Readlink(p); err == nil && target == bin {
			t.Errorf("worker %s still running", p)
		}
	}
}

// The spec language's list of builtins is the registry's.
func TestBuiltinsAgree(t *testing.T) {
	must.Eq(t, builtins.Names(), trainhcl.KnownBuiltins())
}
