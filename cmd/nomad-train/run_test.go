package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
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
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
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
	// The summary: 20 epochs reported, no failure, the best checkpoint by
	// the spec's score, and the command that shows the curves.
	must.StrContains(t, text, `==> summary of run "quickstart"`)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    wall time +[0-9.]+m?s$`), text)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    steps +20 \([0-9.]+/s\)$`), text)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    restarts +0 \(failures used: 0 of 2\)$`), text)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    best checkpoint +results/quickstart/checkpoint_0000\d\d \(loss=[0-9.e-]+\)$`), text)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    curves +nomad-train dashboard \./results, then http://127\.0\.0\.1:8265/#/run\?key=quickstart$`), text)
	// Off a terminal the output is plain lines.
	must.StrNotContains(t, text, "\x1b[")
	m := regexp.MustCompile(`(?m)^\s+loss\s+(\S+)$`).FindStringSubmatch(text)
	must.SliceLen(t, 2, m, must.Sprint(text))
	loss, err := strconv.ParseFloat(m[1], 64)
	must.NoError(t, err)
	must.Less(t, 0.05, loss)
	must.DirExists(t, filepath.Join(cmd.Dir, "results", "quickstart"))
}

// quickstartSpec writes dir/name.hcl: the quickstart builtin for epochs on
// workers, storing into ./results. Its batch splits over the workers (the
// default of 32 where it does, else one example each).
func quickstartSpec(t *testing.T, dir, name string, epochs, workers int) string {
	batch := ""
	if workers > 0 && 32%workers != 0 {
		batch = fmt.Sprintf(", batch_size = %d", workers)
	}
	return writeFile(t, dir, name+".hcl", fmt.Sprintf(`
train %q {
  entrypoint { builtin = "quickstart" }
  config = { epochs = %d%s }
  scaling { num_workers = %d }
  run { storage_path = "./results" }
}
`, name, epochs, batch, workers))
}

// longRun is a local run of a long quickstart, started from the built CLI.
type longRun struct {
	bin, dir string
	cmd      *exec.Cmd
	stdout   io.ReadCloser
	stderr   bytes.Buffer
	seen     []string // stdout lines read
}

// startLongRun starts it and reads its output until epoch 1 is reported.
func startLongRun(t *testing.T) *longRun {
	t.Helper()
	r := &longRun{bin: buildCLI(t), dir: t.TempDir()}
	spec := quickstartSpec(t, r.dir, "long", 100000, 4)
	r.cmd = exec.Command(r.bin, "run", spec)
	r.cmd.Dir = r.dir
	r.cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	var err error
	r.stdout, err = r.cmd.StdoutPipe()
	must.NoError(t, err)
	r.cmd.Stderr = &r.stderr
	must.NoError(t, r.cmd.Start())
	sc := bufio.NewScanner(r.stdout)
	for sc.Scan() {
		r.seen = append(r.seen, sc.Text())
		if strings.Contains(sc.Text(), "epoch 1: loss") {
			break
		}
	}
	return r
}

// stoppedCleanly waits for the run to end and checks that it ended as
// stopped (130), each worker checkpointed and stopped, none cut off
// mid-step, and no worker (a copy of the CLI) is left.
func (r *longRun) stoppedCleanly(t *testing.T) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		r.cmd.Process.Kill()
		t.Fatalf("run did not stop:\n%s\n%s", strings.Join(r.seen, "\n"), r.stderr.String())
	}
	must.Error(t, err)
	must.Eq(t, 130, r.cmd.ProcessState.ExitCode(), must.Sprint(r.stderr.String()))
	st, err := storage.OpenReadOnly(filepath.Join(r.dir, "results"), "long", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.SliceNotEmpty(t, recs)
	must.NotEq(t, "", recs[len(recs)-1].Checkpoint, must.Sprint("no checkpoint at the stop\n", r.stderr.String()))
	for rank := range 4 {
		must.StrContains(t, r.stderr.String(), fmt.Sprintf("[rank %d] nomad-train worker: stopped\n", rank))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		if target, err := os.Readlink(p); err == nil && target == r.bin {
			t.Errorf("worker %s still running", p)
		}
	}
}

// Ctrl-C stops every worker and the run ends with 130, leaving no process
// and a checkpoint of where it stopped (the workers stop between steps).
func TestRunInterrupted(t *testing.T) {
	r := startLongRun(t)
	must.NoError(t, r.cmd.Process.Signal(syscall.SIGINT))
	go io.Copy(io.Discard, r.stdout)
	r.stoppedCleanly(t)
}

// A reader of the output that goes away (nomad-train run | head) stops
// the run as Ctrl-C does: SIGPIPE killed the launcher before it stopped
// its workers in order.
func TestRunStopsWhenItsOutputCloses(t *testing.T) {
	r := startLongRun(t)
	r.stdout.Close()
	r.stoppedCleanly(t)
}

// -local runs on this machine though NOMAD_ADDR names a cluster (here one
// that is not there); with an explicit -address it is a usage error.
func TestRunLocalDespiteNomadAddr(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	spec := quickstartSpec(t, dir, "short", 2, 1)
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append([]string{"run"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NOMAD_ADDR=http://127.0.0.1:1")
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	code, out := run("-local", spec)
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, `==> run "short": 1 worker on this machine`)
	must.StrNotContains(t, out, "the config changed")
	// Run again with more epochs: it resumes, and says what changed.
	spec = quickstartSpec(t, dir, "short", 3, 1)
	code, out = run("-local", spec)
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "the config changed since the last run (epochs 2 → 3)")
	code, out = run(spec)
	must.Eq(t, 1, code, must.Sprint(out))
	must.StrContains(t, out, "127.0.0.1:1")
	code, out = run("-local", "-address", "http://127.0.0.1:1", spec)
	must.Eq(t, 2, code, must.Sprint(out))
	must.StrContains(t, out, "-local and -address contradict each other")
}

// The spec language's list of builtins is the registry's.
func TestBuiltinsAgree(t *testing.T) {
	must.Eq(t, builtins.Names(), trainspec.KnownBuiltins())
}
