package external

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nomad-train/nomad-train/trainer/collective"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// How a failed command counts. The command is the training function: an
// exception in the user's script (an ImportError, a missing train.py, a
// ValueError) fails the same way on every attempt, so it fails the run at
// once (the runtime's training-function failure, never retried), with the
// last lines of the command's stderr (the traceback's end) as the reason.
// A command that fails because its gang broke is a lost worker, retried
// from the latest checkpoint while the failure budget lasts, as torchrun
// restarts its workers:
//
//   - it was killed by a signal (the OOM killer, a kill -9, a crash);
//   - its last words are a collective's failure: a traceback through
//     torch.distributed, or Gloo's or NCCL's report of a lost peer;
//   - a report it made failed because the gang broke;
//   - it exited with workerenv.ExitInfraError (3) or ExitPeerLost (4): the
//     way a script says that what failed was around it (a transient
//     storage error, say) and a restart may get past it, as torchrun
//     would restart it.

// tailLines is how many of the command's last stderr lines a failure quotes.
const tailLines = 8

// peerFailure matches the stderr tail of a command that failed because a
// peer of its torch process group went away rather than by its own fault.
var peerFailure = regexp.MustCompile(`(?i)torch/distributed/|\bgloo\b|\bnccl|` +
	`connection (?:closed|reset) by peer|broken pipe|DistBackendError|DistNetworkError|DistStoreError|` +
	`socket timeout|timed out waiting .* for (?:recv|send)`)

// commandFailure turns the command's exit error into the runner's error: a
// lost worker (wrapping collective.ErrPeerLost) or the training function's
// own failure, quoting tail.
func commandFailure(argv []string, waitErr error, tail string, reportLost bool) error {
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("%w: %w: %v: killed by %s", ErrCommandFailed, collective.ErrPeerLost, argv, signalName(ws.Signal()))
		}
		if c := ee.ExitCode(); c == workerenv.ExitInfraError || c == workerenv.ExitPeerLost {
			reportLost = true
		}
	}
	if !errors.As(waitErr, &ee) || reportLost || peerFailure.MatchString(tail) {
		return fmt.Errorf("%w: %w: %v: %w%s", ErrCommandFailed, collective.ErrPeerLost, argv, waitErr, quote(tail))
	}
	return fmt.Errorf("%w: %v: %w%s", ErrCommandFailed, argv, waitErr, quote(tail))
}

func quote(tail string) string {
	if tail == "" {
		return ""
	}
	return ":\n" + tail
}

// tailWriter passes writes to w and keeps the last n lines written that
// are not blank.
type tailWriter struct {
	w io.Writer
	n int

	mu    sync.Mutex
	lines []string // the last n complete lines
	part  []byte   // a line not yet ended
}

func newTailWriter(w io.Writer, n int) *tailWriter { return &tailWriter{w: w, n: n} }

// maxPartial bounds a line kept while it has no end yet.
const maxPartial = 4 << 10

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	rest := p
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			t.part = append(t.part, rest...)
			if len(t.part) > maxPartial {
				t.part = t.part[len(t.part)-maxPartial:]
			}
			break
		}
		t.push(string(append(t.part, rest[:i]...)))
		t.part = t.part[:0]
		rest = rest[i+1:]
	}
	t.mu.Unlock()
	return t.w.Write(p)
}

func (t *tailWriter) push(line string) {
	line = strings.TrimRight(line, "\r")
	if strings.TrimSpace(line) == "" {
		return // blank lines say nothing in a tail
	}
	if len(line) > maxPartial {
		line = line[:maxPartial]
	}
	t.lines = append(t.lines, line)
	if len(t.lines) > t.n {
		t.lines = t.lines[len(t.lines)-t.n:]
	}
}

// Tail returns the last lines written, each indented, without trailing
// blank lines.
func (t *tailWriter) Tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := append([]string(nil), t.lines...)
	if len(t.part) > 0 {
		lines = append(lines, string(t.part))
		if len(lines) > t.n {
			lines = lines[len(lines)-t.n:]
		}
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

// signalName is SIGKILL for SIGKILL: the signal's own String is "killed",
// which made "killed by killed".
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(sig))
}
