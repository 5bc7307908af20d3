package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// A state written by the launcher reads back; one that says running but
// whose launcher is gone reads lost, with no worker running.
func TestReadState(t *testing.T) {
	host, _ := os.Hostname()
	dead := exec.Command("true")
	must.NoError(t, dead.Run()) // its pid is free once reaped
	for _, tc := range []struct {
		name  string
		st    State
		phase string
	}{
		{"live launcher", State{Host: host, PID: os.Getpid(), Phase: PhaseRunning}, PhaseRunning},
		{"dead launcher", State{Host: host, PID: dead.Process.Pid, Phase: PhaseRunning}, PhaseLost},
		{"another host cannot tell", State{Host: host + "-elsewhere", PID: dead.Process.Pid, Phase: PhaseRunning}, PhaseRunning},
		{"no pid", State{Host: host, PID: 0, Phase: PhaseRunning}, PhaseLost},
		{"ended", State{Host: host, PID: dead.Process.Pid, Phase: PhaseComplete}, PhaseComplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.st.Run, tc.st.Started = "r", time.Now().UTC().Round(0)
			tc.st.Workers = []WorkerState{{Rank: 0, PID: 1, Running: true}}
			must.NoError(t, writeState(dir, tc.st))
			got, err := ReadState(dir)
			must.NoError(t, err)
			must.EqOp(t, tc.phase, got.Phase)
			must.EqOp(t, tc.phase == PhaseRunning || tc.phase == PhaseComplete, got.Workers[0].Running)
			must.EqOp(t, tc.phase == PhaseLost, got.Workers[0].Lost) // its end was never seen
			must.True(t, got.Started.Equal(tc.st.Started))
		})
	}
	_, err := ReadState(t.TempDir())
	must.ErrorContains(t, err, "read launcher state")
}

// ReadState decodes whatever a launch.json holds without panicking: an
// error, or a state whose workers it can index.
func FuzzReadState(f *testing.F) {
	host, _ := os.Hostname()
	f.Add([]byte(`{"run":"quickstart","host":"` + host + `","launcher_pid":1,"phase":"running","num_workers":2,` +
		`"workers":[{"rank":0,"pid":10,"running":true,"metrics":"http://127.0.0.1:4000/metrics"},{"rank":1}]}`))
	f.Add([]byte(`{"phase":"failed","failure":"rank 1: killed by SIGKILL","workers":null}`))
	f.Add([]byte(`{"launcher_pid":-1,"phase":"running","host":"` + host + `"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, StateFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := ReadState(dir)
		if err != nil {
			return
		}
		for _, w := range st.Workers {
			if st.Phase == PhaseLost && w.Running {
				t.Fatalf("a lost run's worker %d reads running", w.Rank)
			}
		}
	})
}

// A local run on S3 keeps its launcher's files in the user's state
// directory, one per storage location however it is spelled, two
// prefixes of a bucket apart; a relative XDG_STATE_HOME is not trusted.
func TestRunDirOfARunOnS3(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	a := RunDir("s3://bucket/runs", "qs")
	must.StrHasPrefix(t, filepath.Join(state, "nomad-train", "runs", "bucket-"), a)
	must.EqOp(t, "qs", filepath.Base(a))
	must.EqOp(t, a, RunDir("s3://bucket/runs/", "qs"))
	must.NotEq(t, a, RunDir("s3://bucket/other", "qs"))
	must.NotEq(t, a, RunDir("s3://bucket2/runs", "qs"))
	must.EqOp(t, filepath.Join("results", "qs"), RunDir("results", "qs"))

	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_STATE_HOME", "relative")
	must.StrHasPrefix(t, filepath.Join(home, ".local", "state", "nomad-train", "runs", "bucket-"), RunDir("s3://bucket/runs", "qs"))
}
