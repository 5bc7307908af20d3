package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

func TestStartLogsAndExitCodes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		mode     string
		args     []string
		code     int
		signal   int
		wantOut  string
		wantErr  string
		succeeds bool
	}{
		{name: "zero", mode: "exit", args: []string{"0"}, code: 0, wantOut: "to stdout", wantErr: "to stderr", succeeds: true},
		{name: "non-zero", mode: "exit", args: []string{"3"}, code: 3, wantOut: "to stdout", wantErr: "to stderr"},
		{name: "killed by signal", mode: "selfkill", code: 128 + 9, signal: 9, wantOut: "dying"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			task := startTask(t, f.config(tc.mode, tc.args...))
			res := waitTask(t, task)
			must.Eq(t, tc.code, res.ExitCode)
			must.Eq(t, tc.signal, res.Signal)
			must.Eq(t, tc.succeeds, res.Successful())
			must.False(t, res.At.IsZero())
			// Stdout and stderr arrive separately, through the FIFOs.
			must.Eq(t, tc.wantOut, expectLine(t, f.outLines, tc.wantOut))
			if tc.wantErr != "" {
				must.Eq(t, tc.wantErr, expectLine(t, f.errLns, tc.wantErr))
			}
			// Wait again, concurrently: same answer.
			again := make(chan ExitResult, 2)
			for range 2 {
				go func() {
					r, _ := task.Wait(context.Background())
					again <- r
				}()
			}
			must.Eq(t, res, <-again)
			must.Eq(t, res, <-again)
		})
	}
}

func TestStopHonoursSIGTERM(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("trap"))
	expectLine(t, f.outLines, "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	begin := time.Now()
	must.NoError(t, task.Stop(ctx, 0, 5*time.Second))
	must.Less(t, 4*time.Second, time.Since(begin)) // did not need the grace
	res := waitTask(t, task)
	must.Eq(t, 0, res.ExitCode)
	must.Eq(t, 0, res.Signal)
	expectLine(t, f.outLines, "terminating")
}

func TestStopKillsGroupAfterGrace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("ignore"))
	line := expectLine(t, f.outLines, "child ")
	child, err := strconv.Atoi(strings.TrimPrefix(line, "child "))
	must.NoError(t, err)
	expectLine(t, f.outLines, "child ready")
	pgid := task.State().PID
	must.SliceContains(t, liveGroup(t, pgid), child)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	grace := 300 * time.Millisecond
	begin := time.Now()
	must.NoError(t, task.Stop(ctx, syscall.SIGTERM, grace))
	must.GreaterEq(t, grace, time.Since(begin))
	res := waitTask(t, task)
	must.Eq(t, int(syscall.SIGKILL), res.Signal)
	must.Eq(t, 137, res.ExitCode)
	assertNoProcesses(t, pgid, child)
}

func TestSignalDelivers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("usr1"))
	expectLine(t, f.outLines, "ready")
	must.NoError(t, task.Signal(syscall.SIGUSR1))
	expectLine(t, f.outLines, "got usr1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must.NoError(t, task.Stop(ctx, syscall.SIGTERM, time.Second))
	res := waitTask(t, task)
	must.Eq(t, int(syscall.SIGTERM), res.Signal)
	// After the exit, signals are refused with ErrTaskExited.
	must.ErrorIs(t, task.Signal(syscall.SIGUSR1), ErrTaskExited)
}

// TestRecoverAfterPluginDeath runs Start in a child process (the plugin),
// SIGKILLs it, and recovers the task here from the State it printed.
func TestRecoverAfterPluginDeath(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	trigger := filepath.Join(f.dir, "trigger")
	cfg := f.config("waitfile", trigger, "7")
	cfgJSON, err := json.Marshal(cfg)
	must.NoError(t, err)

	plugin := exec.Command(os.Args[0], "-test.run=^$")
	plugin.Env = append(os.Environ(), envPlugin+"="+string(cfgJSON))
	plugin.Stderr = testWriter{t}
	// The plugin leads a process group, and the whole group gets killed
	// (as a terminal's Ctrl-C or a service manager would): the shim
	// survives only because it runs in a session of its own.
	plugin.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := plugin.StdoutPipe()
	must.NoError(t, err)
	must.NoError(t, plugin.Start())
	line, err := bufio.NewReader(out).ReadBytes('\n')
	must.NoError(t, err)
	var st State
	must.NoError(t, json.Unmarshal(line, &st))
	expectLine(t, f.outLines, "waiting")

	// The plugin dies; the task must not.
	must.NoError(t, syscall.Kill(-plugin.Process.Pid, syscall.SIGKILL))
	_ = plugin.Wait()
	must.True(t, alive(st.ShimPID))
	must.True(t, alive(st.PID))

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	task, err := Recover(ctx, st, testLogger(t))
	must.NoError(t, err)
	t.Cleanup(func() { _ = task.Destroy(context.Background(), true) })
	must.Eq(t, st, task.State())

	must.NoError(t, os.WriteFile(trigger, nil, 0o600))
	res, err := task.Wait(ctx)
	must.NoError(t, err)
	must.Eq(t, 7, res.ExitCode)
	expectLine(t, f.outLines, "done waiting")

	// Recovering again after the exit reports the recorded status.
	again, err := Recover(ctx, st, hclog.NewNullLogger())
	must.NoError(t, err)
	res2, err := again.Wait(ctx)
	must.NoError(t, err)
	must.Eq(t, res, res2)
	must.NoError(t, again.Destroy(ctx, false))

	// With the record gone too, the task is lost.
	_, err = Recover(ctx, st, hclog.NewNullLogger())
	must.ErrorIs(t, err, ErrTaskNotFound)
}

func TestRecoverWhileRunningThenStop(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	first := startTask(t, f.config("usr1"))
	expectLine(t, f.outLines, "ready")
	// Drop the handle (as a plugin restart would) and recover a new one.
	task, err := Recover(context.Background(), first.State(), hclog.NewNullLogger())
	must.NoError(t, err)
	must.NoError(t, task.Signal(syscall.SIGUSR1))
	expectLine(t, f.outLines, "got usr1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must.NoError(t, task.Stop(ctx, syscall.SIGTERM, time.Second))
	res, err := task.Wait(ctx)
	must.NoError(t, err)
	must.Eq(t, int(syscall.SIGTERM), res.Signal)
	must.ErrorIs(t, task.Destroy(ctx, false), nil)
	assertNoProcesses(t, task.State().PID)
	_, err = os.Stat(task.State().StateDir)
	must.True(t, errors.Is(err, os.ErrNotExist))
}

func TestRecoverDetectsPIDReuse(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("usr1"))
	expectLine(t, f.outLines, "ready")
	st := task.State()
	st.ShimStartTime++ // as if the pids now belonged to other processes
	st.PIDStartTime++
	_, err := Recover(context.Background(), st, hclog.NewNullLogger())
	must.ErrorIs(t, err, ErrTaskNotFound)
}

func TestDestroyWithoutForceRefusesRunningTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("usr1"))
	expectLine(t, f.outLines, "ready")
	must.ErrorIs(t, task.Destroy(context.Background(), false), ErrTaskRunning)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must.NoError(t, task.Destroy(ctx, true))
	res, err := task.Wait(ctx)
	must.NoError(t, err)
	must.Eq(t, 9, res.Signal)
	assertNoProcesses(t, task.State().PID)
}

func TestStartConfigErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	noUser := func(name string) (*userRecord, error) { return nil, unknownUser(name) }
	cases := []struct {
		name   string
		edit   func(*Config)
		field  string
		target error
	}{
		{name: "missing command", edit: func(c *Config) { c.Command = "" }, field: "Command"},
		{name: "command not found", edit: func(c *Config) { c.Command = "no-such-command-xyz" }, field: "Command", target: ErrCommandNotFound},
		{name: "relative command missing", edit: func(c *Config) { c.Command = "./nope" }, field: "Command", target: ErrCommandNotFound},
		{name: "relative dir that does not exist", edit: func(c *Config) { c.Dir = "no/such/dir" }, field: "Dir", target: os.ErrNotExist},
		{name: "unknown user", edit: func(c *Config) { c.User = "no-such-user-xyz" }, field: "User", target: ErrUnknownUser},
		{name: "bad env", edit: func(c *Config) { c.Env = []string{"NOEQUALS"} }, field: "Env"},
		{name: "missing state dir", edit: func(c *Config) { c.StateDir = "" }, field: "StateDir"},
		{name: "relative cgroup", edit: func(c *Config) { c.CgroupPath = "a/b" }, field: "CgroupPath"},
		{name: "missing shim", edit: func(c *Config) { c.ShimPath = filepath.Join(f.dir, "no-shim") }, field: "ShimPath"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := f.config("exit", "0")
			cfg.StdoutPath, cfg.StderrPath = "", ""
			tc.edit(&cfg)
			_, err := Start(context.Background(), cfg, nil, WithUserLookup(noUser))
			var ce *ConfigError
			must.True(t, errors.As(err, &ce), must.Sprintf("error %v is not a ConfigError", err))
			must.Eq(t, tc.field, ce.Field)
			must.StrContains(t, err.Error(), tc.field)
			must.False(t, IsRecoverable(err))
			if tc.target != nil {
				must.ErrorIs(t, err, tc.target)
			}
		})
	}
}

func TestStartCancelledWhileWaitingForLogReader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "out.fifo")
	must.NoError(t, syscall.Mkfifo(fifo, 0o600)) // nobody reads it
	cfg := Config{TaskID: "t", Command: os.Args[0], Env: []string{envWorker + "=exit"}, StdoutPath: fifo,
		StateDir: filepath.Join(dir, "s"), ShimPath: os.Args[0]}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Start(ctx, cfg, nil)
	must.ErrorIs(t, err, context.DeadlineExceeded)
	must.True(t, IsRecoverable(err))
}

func TestLogsToRegularFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{TaskID: "t", Command: os.Args[0], Args: []string{"4"}, Env: []string{envWorker + "=exit"},
		StdoutPath: filepath.Join(dir, "out.log"), StderrPath: filepath.Join(dir, "err.log"),
		StateDir: filepath.Join(dir, "s"), ShimPath: os.Args[0]}
	task := startTask(t, cfg)
	must.Eq(t, 4, waitTask(t, task).ExitCode)
	out, err := os.ReadFile(cfg.StdoutPath)
	must.NoError(t, err)
	must.Eq(t, "to stdout\n", string(out))
	errb, err := os.ReadFile(cfg.StderrPath)
	must.NoError(t, err)
	must.Eq(t, "to stderr\n", string(errb))
}

// shellConfig is a task running a shell command with the fixture's FIFOs.
func (f *fixture) shellConfig(script string) Config {
	cfg := f.config("unused")
	cfg.Command, cfg.Args = "sh", []string{"-c", script}
	return cfg
}

func TestWorkerGetsOnlyStdio(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("usr1"))
	expectLine(t, f.outLines, "ready")
	dir := filepath.Join("/proc", strconv.Itoa(task.State().PID), "fd")
	ents, err := os.ReadDir(dir)
	must.NoError(t, err)
	toFIFO := map[string][]string{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		must.NoError(t, err)
		must.False(t, strings.HasPrefix(target, "pipe:"), must.Sprintf("fd %s is a pipe: the status pipe leaked", e.Name()))
		must.NotEq(t, f.config("usr1").StateDir, target, must.Sprintf("fd %s is the shim's state dir", e.Name()))
		toFIFO[target] = append(toFIFO[target], e.Name())
	}
	// Exactly fd 1 and fd 2 hold the FIFOs: no leaked copies of the shim's.
	must.Eq(t, []string{"1"}, toFIFO[f.stdout])
	must.Eq(t, []string{"2"}, toFIFO[f.stderr])
}

// TestStopWithSIGINT checks that the worker starts with default signal
// dispositions: sleep(1) dies of SIGINT unless the shim left it ignored.
func TestStopWithSIGINT(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.shellConfig("echo ready; exec sleep 60"))
	expectLine(t, f.outLines, "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	must.NoError(t, task.Stop(ctx, syscall.SIGINT, 10*time.Second))
	res := waitTask(t, task)
	must.Eq(t, int(syscall.SIGINT), res.Signal)
	must.Eq(t, 130, res.ExitCode)
}

func TestShimDeathLeavesExitUnknown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("usr1"))
	expectLine(t, f.outLines, "ready")
	must.NoError(t, syscall.Kill(task.State().ShimPID, syscall.SIGKILL))
	// The worker outlives its shim and the task is still running.
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := task.Wait(short)
	must.ErrorIs(t, err, context.DeadlineExceeded)
	must.True(t, alive(task.State().PID))

	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	must.NoError(t, task.Stop(ctx, syscall.SIGTERM, time.Second))
	res, err := task.Wait(ctx)
	must.ErrorIs(t, err, ErrExitUnknown)
	must.Eq(t, -1, res.ExitCode)
	must.NotEq(t, "", res.Err)
	assertNoProcesses(t, task.State().PID)
}

// TestShimForwardsSIGTERM: a SIGTERM to the shim itself (a host shutdown)
// reaches the worker, and the exit is still recorded.
func TestShimForwardsSIGTERM(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("trap"))
	expectLine(t, f.outLines, "ready")
	must.NoError(t, syscall.Kill(task.State().ShimPID, syscall.SIGTERM))
	expectLine(t, f.outLines, "terminating")
	res := waitTask(t, task)
	must.Eq(t, 0, res.ExitCode)
	must.True(t, res.Successful())
}

func TestRelativeShimPath(t *testing.T) {
	t.Parallel()
	cwd, err := os.Getwd()
	must.NoError(t, err)
	rel, err := filepath.Rel(cwd, os.Args[0])
	must.NoError(t, err)
	dir := t.TempDir()
	cfg := Config{TaskID: "t", Command: os.Args[0], Args: []string{"5"}, Env: []string{envWorker + "=exit"},
		StateDir: filepath.Join(dir, "s"), ShimPath: rel}
	task := startTask(t, cfg)
	must.Eq(t, 5, waitTask(t, task).ExitCode)
	must.True(t, filepath.IsAbs(task.State().Config.ShimPath))
}
