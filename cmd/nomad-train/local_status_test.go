package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/launch"
)

// status, list and logs read a finished local run from its storage: by
// its directory or by -storage and name, with no Nomad address.
func TestLocalStatusListLogs(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "")
	bin := buildCLI(t)
	dir := t.TempDir()
	spec := quickstartSpec(t, dir, "localrun", 3, 2)
	cmd := exec.Command(bin, "run", spec)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "    metrics (Prometheus): rank 0 http://127.0.0.1:")
	results := filepath.Join(dir, "results")
	runDir := filepath.Join(results, "localrun")

	for _, args := range [][]string{{"status", runDir}, {"status", "-storage", results, "localrun"}} {
		t.Run(strings.Join(args[:len(args)-1], " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, args...)
			must.EqOp(t, 0, code, must.Sprint(stderr))
			must.StrContains(t, stdout, "run localrun: complete (local, launcher pid")
			must.StrContains(t, stdout, "2 workers, 0 restarts")
			must.StrContains(t, stdout, "exited (0)")
			must.StrContains(t, stdout, launch.LogPath(runDir, 1))
			must.StrContains(t, stdout, "last report: step 3 epoch 2 loss=")
			must.RegexMatch(t, regexp.MustCompile(`(?m)^checkpoints: \d+ kept; the latest, of step 3: `+
				regexp.QuoteMeta(filepath.Join(runDir, "checkpoint_000002"))+`$`), stdout)
		})
	}
	t.Run("list", func(t *testing.T) {
		for _, args := range [][]string{{"list", results}, {"list", "-storage", results}, {"status", "-storage", results}} {
			code, stdout, stderr := runCLI(t, args...)
			must.EqOp(t, 0, code, must.Sprint(stderr))
			must.RegexMatch(t, regexp.MustCompile(`(?m)^RUN\s+STATUS\s+STEP\s+RESTARTS\s+UPDATED\nlocalrun\s+complete\s+3\s+0\s+`), stdout)
		}
	})
	t.Run("logs", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, "logs", runDir)
		must.EqOp(t, 0, code, must.Sprint(stderr))
		must.Eq(t, "epoch 0: loss", stdout[:len("epoch 0: loss")])
		must.StrContains(t, stdout, "epoch 2: loss")
		// -f on a finished run prints it and returns.
		code, followed, _ := runCLI(t, "logs", "-f", "-rank", "0", "-storage", results, "localrun")
		must.EqOp(t, 0, code)
		must.EqOp(t, stdout, followed)
		code, _, stderr = runCLI(t, "logs", "-rank", "7", runDir)
		must.EqOp(t, 1, code)
		must.StrContains(t, stderr, "no log of rank 7")
	})
}

// syncBuffer is a bytes.Buffer for one writer and one reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logs -f follows a running local run's log across a rotation, and ends
// when the run does, having printed every line once, in order.
func TestLocalLogsFollowRotation(t *testing.T) {
	defer func(d time.Duration) { logsPollEvery = d }(logsPollEvery)
	logsPollEvery = 5 * time.Millisecond
	runDir := filepath.Join(t.TempDir(), "r")
	logPath := launch.LogPath(runDir, 0)
	must.NoError(t, os.MkdirAll(filepath.Dir(logPath), 0o755))
	host, _ := os.Hostname()
	setPhase := func(phase string) {
		b, err := json.Marshal(launch.State{Run: "r", Host: host, PID: os.Getpid(), Phase: phase, NumWorkers: 1})
		must.NoError(t, err)
		must.NoError(t, os.WriteFile(filepath.Join(runDir, launch.StateFile), b, 0o644))
	}
	appendLog := func(line string) {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		must.NoError(t, err)
		_, err = f.WriteString(line)
		must.NoError(t, err)
		must.NoError(t, f.Close())
	}
	deadline := time.Now().Add(time.Minute) // a bound for a broken follower, not a timing
	waitFor := func(out *syncBuffer, s string) {
		for !strings.Contains(out.String(), s) {
			if time.Now().After(deadline) {
				t.Fatalf("logs -f never printed %q; printed %q", s, out.String())
			}
			time.Sleep(time.Millisecond)
		}
	}
	setPhase(launch.PhaseRunning)
	appendLog("a\n")
	var out syncBuffer
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { done <- logsCmd(ctx, []string{"-f", runDir}, &out, &out) }()
	waitFor(&out, "a\n")
	appendLog("b\n")
	waitFor(&out, "b\n")
	appendLog("c\n") // the tail of the old file, perhaps read only after the rotation
	must.NoError(t, os.Rename(logPath, logPath+".1"))
	appendLog("d\n")
	waitFor(&out, "d\n")
	setPhase(launch.PhaseComplete)
	must.EqOp(t, 0, <-done)
	must.EqOp(t, "a\nb\nc\nd\n", out.String())
}
