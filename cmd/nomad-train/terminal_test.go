//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair of cols columns: the controller
// (what a terminal emulator reads) and the terminal a program writes to.
func openPTY(t *testing.T, cols, rows uint16) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	must.NoError(t, unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	must.NoError(t, err)
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	must.NoError(t, err)
	must.NoError(t, unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}))
	return ptmx, tty
}

// screen collects what a program wrote to a terminal.
type screen struct {
	mu  sync.Mutex
	b   bytes.Buffer
	eof chan struct{}
}

func readScreen(ptmx io.Reader) *screen {
	s := &screen{eof: make(chan struct{})}
	go func() {
		defer close(s.eof)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			s.mu.Lock()
			s.b.Write(buf[:n])
			s.mu.Unlock()
			if err != nil { // EIO once the last writer closed the terminal
				return
			}
		}
	}()
	return s
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// On a terminal, run shows a progress bar with the rate and the time
// left under the workers' lines, redrawn in place, and removes it for the
// summary; before the first report it says what it waits for.
func TestRunProgressBarOnATerminal(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	spec := quickstartSpec(t, dir, "bar", 100000, 2)
	ptmx, tty := openPTY(t, 100, 30)
	cmd := exec.Command(bin, "run", spec)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=", "TERM=xterm")
	cmd.Stdout, cmd.Stderr = tty, tty
	must.NoError(t, cmd.Start())
	tty.Close() // the child holds it now
	scr := readScreen(ptmx)
	bar := regexp.MustCompile(`\r\x1b\[J\[rank 0\] epoch \d+: loss [0-9.e-]+\r?\n(epoch (\d+)/100000 \[=*>? *\] +\d+%  \d+:\d\d  [0-9.]+ epoch/s  ETA [0-9:]+  loss=[0-9.e-]+)`)
	deadline := time.Now().Add(2 * time.Minute) // a bound for a broken bar, not a timing
	for !bar.MatchString(scr.String()) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			out := scr.String()
			t.Fatalf("no progress bar with a rate on the terminal; it ends with %q", out[max(0, len(out)-3000):])
		}
		time.Sleep(10 * time.Millisecond)
	}
	must.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	<-scr.eof
	var exit *exec.ExitError
	must.True(t, errors.As(err, &exit), must.Sprintf("want exit status 130, got %v", err))
	must.EqOp(t, 130, exit.ExitCode())
	out := scr.String()
	for _, m := range bar.FindAllStringSubmatch(out, -1) {
		must.LessEq(t, 99, len(m[1]), must.Sprint("a bar fits the terminal's width less one"))
	}
	must.RegexMatch(t, regexp.MustCompile(`(starting workers: \d of 2 running|waiting for 2 workers to rendezvous and report|waiting for the first report) \(0:\d\d\)`), out)
	// The metrics line clears the bar's line first; it ran into it.
	must.RegexMatch(t, regexp.MustCompile(`\r\x1b\[J    metrics \(Prometheus\): rank 0 http://`), out)
	// The bar is removed (its last draw cleared) before the result and the
	// summary, which are plain lines.
	i := strings.Index(out, `==> summary of run "bar"`)
	must.Positive(t, i, must.Sprint(out[max(0, len(out)-3000):]))
	last := strings.LastIndex(out[:i], "\r\x1b[J")
	must.Positive(t, last)
	must.StrNotContains(t, out[last:], "/100000 [")
	must.StrNotContains(t, out[last+len("\r\x1b[J"):], "\x1b[")
	must.RegexMatch(t, regexp.MustCompile(`steps +\d+ \([0-9.]+/s\)`), out[i:])
}

// On a terminal, tune redraws its trial table in place (the cursor goes
// back up over the last table and clears it) and leaves the last one on
// the screen above the results and the summary.
func TestTuneTableRedrawsOnATerminal(t *testing.T) {
	bin := buildCLI(t)
	dir, spec := hclSpec(t, `
train "tty-tune" {
  entrypoint { builtin = "quickstart" }
  config = { lr = grid_search([0.01, 0.1]), epochs = 4, samples = 500 }
  scaling { num_workers = 1 }
  run { storage_path = "./results" }
  tune {
    metric = "loss"
    mode   = "min"
  }
}`)
	ptmx, tty := openPTY(t, 100, 30)
	cmd := localTune(bin, dir, "-progress", "20ms", spec)
	cmd.Env = append(cmd.Env, "TERM=xterm")
	cmd.Stdout, cmd.Stderr = tty, tty
	must.NoError(t, cmd.Start())
	tty.Close()
	scr := readScreen(ptmx)
	must.NoError(t, cmd.Wait())
	<-scr.eof
	out := scr.String()
	tail := out[max(0, len(out)-3000):]
	// A redraw: up over the last table (its header and rows), clear, draw.
	must.RegexMatch(t, regexp.MustCompile(`\r\x1b\[3A\x1b\[J== tty-tune: 2 trials \(`), out, must.Sprint(tail))
	i := strings.Index(out, "==> results ")
	must.Positive(t, i, must.Sprint(tail))
	must.RegexMatch(t, regexp.MustCompile(`== tty-tune: 2 trials \(2 TERMINATED\)\r?\n.*\r?\ntrial_0000 +TERMINATED.*\r?\ntrial_0001 +TERMINATED[^\n]*\r?\n\r?\n?==> results `), out, must.Sprint(tail))
	must.StrNotContains(t, out[i:], "\x1b[")
	must.StrContains(t, out[i:], `==> summary of experiment "tty-tune"`)
}
