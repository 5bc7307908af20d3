package console

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// -fresh moves a run aside only when nothing runs it: not while its
// launcher lives, nor while a worker holds its writer lock (the old
// gang's workers would write into the fresh run by path).
func TestStartFreshRefusesARunThatGoes(t *testing.T) {
	root := t.TempDir()
	spec, diags := trainspec.Parse([]byte(fmt.Sprintf(`
train "qs" {
  entrypoint { builtin = "quickstart" }
  run { storage_path = %q }
}`, root)), "train.hcl", trainspec.ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags))
	dir := filepath.Join(root, "qs")
	appendRecords(t, root, "qs", storage.Record{Step: 1, Time: tbTime, Metrics: map[string]any{"loss": 1.0}})
	now := time.Date(2026, 12, 5, 16, 0, 0, 0, time.UTC)
	var out strings.Builder

	// Its launcher is alive (this process, as far as the state says).
	host, _ := os.Hostname()
	b, err := json.Marshal(launch.State{Run: "qs", Host: host, PID: os.Getpid(), Phase: launch.PhaseRunning})
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(dir, launch.StateFile), b, 0o644))
	err = StartFresh(spec, now, &out)
	must.ErrorContains(t, err, fmt.Sprintf("-fresh: run qs is still going (its launcher, pid %d on %s); stop it first", os.Getpid(), host))
	must.FileExists(t, filepath.Join(dir, storage.ProgressFile))

	// The launcher gone, a worker still writing.
	must.NoError(t, os.Remove(filepath.Join(dir, launch.StateFile)))
	w, err := storage.Open(root, "qs", storage.Policy{})
	must.NoError(t, err)
	err = StartFresh(spec, now, &out)
	must.ErrorIs(t, err, storage.ErrLocked)
	must.ErrorContains(t, err, "-fresh: a worker of run qs still writes to it")
	must.FileExists(t, filepath.Join(dir, storage.ProgressFile))
	must.NoError(t, w.Close())

	// Nothing runs it: moved aside, whole.
	must.NoError(t, StartFresh(spec, now, &out))
	must.StrContains(t, out.String(), "==> starting afresh: the previous run moved to ")
	_, err = os.Stat(dir)
	must.ErrorIs(t, err, os.ErrNotExist)
	aside, err := filepath.Glob(dir + ".old-*")
	must.NoError(t, err)
	must.SliceLen(t, 1, aside)
	must.FileExists(t, filepath.Join(aside[0], storage.ProgressFile))

	// No run at all: nothing to say.
	out.Reset()
	must.NoError(t, StartFresh(spec, now, &out))
	must.EqOp(t, "", out.String())
}

// A worker of a run whose launcher is gone reads lost, not "exited (0)":
// how it ended was never seen.
func TestWorkerStateOfALostRun(t *testing.T) {
	for _, tc := range []struct {
		w    launch.WorkerState
		want string
	}{
		{launch.WorkerState{PID: 10, Running: true}, "running"},
		{launch.WorkerState{PID: 10, Lost: true}, "lost"},
		{launch.WorkerState{PID: 10, Signal: "SIGKILL", ExitCode: 137}, "killed (SIGKILL)"},
		{launch.WorkerState{PID: 10, ExitCode: 1}, "exited (1)"},
		{launch.WorkerState{}, "pending"},
	} {
		must.EqOp(t, tc.want, workerState(tc.w))
	}
}
