package executor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"golang.org/x/sys/unix"
)

// TestStateFilesRefuseWhatStartNeverWrites: exit.json and spec.json are
// decoded with bounds, and a file that is too long, not a regular file or
// not what the executor writes is an error, not a worker run with a
// relative path or an exit code no process can have.
func TestStateFilesRefuseWhatStartNeverWrites(t *testing.T) {
	stateDir := func() string { // as createStateDir makes them
		d := t.TempDir()
		must.NoError(t, os.Chmod(d, 0o700))
		return d
	}
	dir := stateDir()
	must.NoError(t, os.WriteFile(filepath.Join(dir, exitFile), []byte(`{"ExitCode":0,"Signal":0}`+strings.Repeat(" ", maxExitFile)), 0o600))
	_, _, err := readExitFile(State{StateDir: dir})
	must.True(t, errors.Is(err, errStateFile), must.Sprintf("got %v", err))

	notFile := stateDir()
	must.NoError(t, os.Mkdir(filepath.Join(notFile, exitFile), 0o700)) // a directory where the file should be
	_, _, err = readExitFile(State{StateDir: notFile})
	must.True(t, errors.Is(err, errStateFile), must.Sprintf("got %v", err))

	fifo := stateDir()
	must.NoError(t, unix.Mkfifo(filepath.Join(fifo, exitFile), 0o600)) // no writer: a blocking open would hang here
	_, _, err = readExitFile(State{StateDir: fifo})
	must.True(t, errors.Is(err, errStateFile), must.Sprintf("got %v", err))

	for name, b := range map[string]string{
		"negative signal":    `{"ExitCode":1,"Signal":-9}`,
		"exit code too high": `{"ExitCode":100000}`,
	} {
		t.Run("exit "+name, func(t *testing.T) {
			_, err := decodeExitResult([]byte(b))
			must.True(t, errors.Is(err, errStateFile), must.Sprintf("got %v", err))
		})
	}
	for name, b := range map[string]string{
		"relative path":  `{"TaskID":"t","Path":"bin/sh","Args":["sh"]}`,
		"no argv":        `{"TaskID":"t","Path":"/bin/sh"}`,
		"no task id":     `{"Path":"/bin/sh","Args":["sh"]}`,
		"relative dir":   `{"TaskID":"t","Path":"/bin/sh","Args":["sh"],"Dir":"local"}`,
		"relative group": `{"TaskID":"t","Path":"/bin/sh","Args":["sh"],"Cgroup":"x"}`,
	} {
		t.Run("spec "+name, func(t *testing.T) {
			_, err := decodeShimSpec([]byte(b))
			must.True(t, errors.Is(err, errStateFile), must.Sprintf("got %v", err))
		})
	}
}

func FuzzDecodeExitResult(f *testing.F) {
	for _, r := range []ExitResult{
		{At: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{ExitCode: 137, Signal: 9, OOMKilled: true},
		{ExitCode: -1, Err: ErrExitUnknown.Error()},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"ExitCode":1e400}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := decodeExitResult(b)
		if err != nil {
			return
		}
		if res.Signal < 0 || res.ExitCode < -1 || res.ExitCode > 255+128 {
			t.Fatalf("accepted %+v", res)
		}
		if res.Successful() && (res.ExitCode != 0 || res.Err != "") {
			t.Fatalf("successful with %+v", res)
		}
	})
}

func FuzzDecodeShimSpec(f *testing.F) {
	for _, s := range []shimSpec{
		{TaskID: "a/t/1", Path: "/bin/sh", Args: []string{"/bin/sh", "-c", "true"}, Env: []string{"A=1"}, Dir: "/alloc/t", Cgroup: "/sys/fs/cgroup/nomad.slice/x"},
		{TaskID: "t", Path: "/usr/bin/python3", Args: []string{"python3", "train.py"}, Cred: &credential{UID: 65534, GID: 65534, Groups: []uint32{65534}, Home: "/nonexistent", Name: "nobody"}},
	} {
		b, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"TaskID":"t","Path":"/x","Args":[],"Cred":{"UID":-1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		spec, err := decodeShimSpec(b)
		if err != nil {
			return
		}
		if spec.TaskID == "" || !filepath.IsAbs(spec.Path) || len(spec.Args) == 0 ||
			(spec.Dir != "" && !filepath.IsAbs(spec.Dir)) || (spec.Cgroup != "" && !filepath.IsAbs(spec.Cgroup)) {
			t.Fatalf("accepted %+v", spec)
		}
	})
}

// TestRecoverRefusesImpossiblePIDs: a saved state naming pid 1 (init, whose
// start time anyone can read) would have Stop send SIGKILL to process group
// -1, every process on the host.
func TestRecoverRefusesImpossiblePIDs(t *testing.T) {
	init, err := readProcStat(1)
	must.NoError(t, err)
	for name, st := range map[string]State{
		"init as worker": {TaskID: "t", StateDir: t.TempDir(), PID: 1, PIDStartTime: init.StartTime},
		"negative shim":  {TaskID: "t", StateDir: t.TempDir(), PID: 2, ShimPID: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Recover(context.Background(), st, nil)
			must.ErrorIs(t, err, ErrTaskNotFound)
		})
	}
}
