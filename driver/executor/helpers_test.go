package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// The test binary is shim, worker and fake plugin. TestMain dispatches.
const (
	envWorker = "EXECUTOR_TEST_WORKER"
	envPlugin = "EXECUTOR_TEST_PLUGIN"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ShimArg {
		os.Exit(ShimMain(os.Args[1:]))
	}
	if mode := os.Getenv(envWorker); mode != "" {
		os.Exit(workerMain(mode, os.Args[1:]))
	}
	if cfg := os.Getenv(envPlugin); cfg != "" {
		os.Exit(fakePlugin(cfg))
	}
	if dir := os.Getenv(envAttacker); dir != "" {
		os.Exit(attackerMain(dir, []byte(os.Getenv("ATTACK_SPEC"))))
	}
	os.Exit(m.Run())
}

// workerMain is the task's process in tests.
func workerMain(mode string, args []string) int {
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, a ...any) {
		fmt.Fprintf(out, format+"\n", a...)
		out.Flush()
	}
	switch mode {
	case "exit": // exit CODE: a line on each stream, then exit
		code, _ := strconv.Atoi(args[0])
		say("to stdout")
		fmt.Fprintln(os.Stderr, "to stderr")
		return code
	case "selfkill":
		say("dying")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return 1
	case "trap": // exits 0 on SIGTERM
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		say("ready")
		<-ch
		say("terminating")
		return 0
	case "ignore": // ignores SIGTERM, as does its child
		signal.Ignore(syscall.SIGTERM)
		if len(args) == 0 {
			child := exec.Command(os.Args[0], "child")
			child.Env = os.Environ()
			child.Stdout = os.Stdout
			if err := child.Start(); err != nil {
				say("start child: %v", err)
				return 1
			}
			say("child %d", child.Process.Pid)
		} else {
			say("child ready")
		}
		time.Sleep(time.Hour)
		return 0
	case "usr1": // reports SIGUSR1 on stdout
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		say("ready")
		<-ch
		say("got usr1")
		time.Sleep(time.Hour)
		return 0
	case "busy": // a busy loop whose child holds 64 MiB
		if len(args) > 0 {
			mem := make([]byte, 64<<20)
			for i := 0; i < len(mem); i += 4096 { // one write per page
				mem[i] = 1
			}
			say("allocated")
			time.Sleep(time.Hour)
			return int(mem[4096]) - 1
		}
		child := exec.Command(os.Args[0], "child")
		child.Env = os.Environ()
		child.Stdout = os.Stdout
		if err := child.Start(); err != nil {
			return 1
		}
		x := 0
		for {
			x++
		}
	case "hog": // allocates up to 1 GiB, then idles
		var keep [][]byte
		for range 128 {
			b := make([]byte, 8<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			keep = append(keep, b)
		}
		say("survived %d MiB", len(keep)*8)
		time.Sleep(time.Hour)
		return 0
	case "waitfile": // waitfile PATH CODE: exit CODE once PATH exists
		code, _ := strconv.Atoi(args[1])
		say("waiting")
		for {
			if _, err := os.Stat(args[0]); err == nil {
				say("done waiting")
				return code
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	fmt.Fprintf(os.Stderr, "unknown worker mode %q\n", mode)
	return 99
}

// fakePlugin starts a task, prints its State as one JSON line and hangs
// until killed: the plugin that dies under a running task.
func fakePlugin(cfgJSON string) int {
	var cfg Config
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	task, err := Start(context.Background(), cfg, hclog.NewNullLogger())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	b, _ := json.Marshal(task.State())
	fmt.Println(string(b))
	time.Sleep(time.Hour)
	return 0
}

// fixture is one task's files: state dir, FIFOs and their readers.
type fixture struct {
	dir              string
	stdout, stderr   string
	outLines, errLns chan string
}

// newFixture makes a task directory with two FIFOs and starts a reader on
// each, as Nomad's logmon does.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, stdout: filepath.Join(dir, ".t.stdout.fifo"), stderr: filepath.Join(dir, ".t.stderr.fifo")}
	must.NoError(t, syscall.Mkfifo(f.stdout, 0o600))
	must.NoError(t, syscall.Mkfifo(f.stderr, 0o600))
	f.outLines = readFIFO(t, f.stdout)
	f.errLns = readFIFO(t, f.stderr)
	return f
}

// readFIFO opens path for reading (blocking until a writer comes, like
// logmon) and sends each line; the channel closes at EOF.
func readFIFO(t *testing.T, path string) chan string {
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		f, err := os.Open(path)
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	// Unblock the reader's open if the test never started a writer.
	t.Cleanup(func() {
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	return ch
}

// config is a task running the test binary in the given worker mode.
func (f *fixture) config(mode string, args ...string) Config {
	return Config{
		TaskID:     "task-" + mode,
		Command:    os.Args[0],
		Args:       args,
		Env:        []string{envWorker + "=" + mode, "PATH=" + os.Getenv("PATH"), "FOO=bar"},
		Dir:        f.dir,
		StdoutPath: f.stdout,
		StderrPath: f.stderr,
		StateDir:   filepath.Join(f.dir, "executor"),
		ShimPath:   os.Args[0],
	}
}

// expectLine waits for a line with the given prefix.
func expectLine(t *testing.T, ch <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended before a line starting %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line starting %q within 30s", prefix)
		}
	}
}

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: testWriter{t}})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func startTask(t *testing.T, cfg Config) *Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	task, err := Start(ctx, cfg, hclog.NewNullLogger())
	must.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		must.NoError(t, task.Destroy(ctx, true))
		assertNoProcesses(t, task.State().PID, task.State().ShimPID)
		// The shim was our child: it must have been reaped, not left a zombie.
		if st, err := readProcStat(task.State().ShimPID); err == nil && st.PPID == os.Getpid() {
			t.Errorf("shim %d is still our child in state %c", st.PID, st.State)
		}
	})
	return task
}

func waitTask(t *testing.T, task *Task) ExitResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := task.Wait(ctx)
	must.NoError(t, err)
	return res
}

// liveGroup lists the live processes of process group pgid.
func liveGroup(t *testing.T, pgid int) []int {
	procs, err := listProcs()
	must.NoError(t, err)
	var out []int
	for _, p := range procs {
		if p.PGRP == pgid && p.State != 'Z' && p.State != 'X' {
			out = append(out, p.PID)
		}
	}
	return out
}

// alive reports whether pid runs (zombies count as dead).
func alive(pid int) bool {
	st, err := readProcStat(pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}

// assertNoProcesses fails when anything of process group pgid still runs.
func assertNoProcesses(t *testing.T, pgid int, extra ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := liveGroup(t, pgid)
		for _, p := range extra {
			if alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of task group %d still alive: %v", pgid, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type userRecord = user.User

func unknownUser(name string) error { return user.UnknownUserError(name) }
