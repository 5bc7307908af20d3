package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

func newTestServer(t *testing.T, o Options) *httptest.Server {
	t.Helper()
	if o.Interval == 0 {
		o.Interval = 5 * time.Millisecond
	}
	s, err := New(context.Background(), o)
	must.NoError(t, err)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs
}

// appendSteps writes records for steps through the storage writer.
func appendSteps(t *testing.T, run storage.RunStore, steps ...int64) {
	t.Helper()
	for _, s := range steps {
		must.NoError(t, run.Append(storage.Record{Step: s, Metrics: map[string]any{"loss": 1 / float64(s+1)}}))
	}
}

// commit writes a checkpoint with a record for step through the storage writer.
func commit(t *testing.T, run storage.RunStore, step int64, loss float64) {
	t.Helper()
	st, err := run.Stage()
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(st.Dir(), "model.bin"), []byte("w"), 0o644))
	_, err = run.Commit(st, storage.Record{Step: step, Metrics: map[string]any{"loss": loss}})
	must.NoError(t, err)
}

// events reads server-sent events from path, one decoded data line at a time.
type events struct {
	t      *testing.T
	cancel context.CancelFunc
	sc     *bufio.Scanner
}

func openEvents(t *testing.T, base, path string) *events {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	must.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	must.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	must.EqOp(t, http.StatusOK, resp.StatusCode)
	must.StrHasPrefix(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return &events{t: t, cancel: cancel, sc: bufio.NewScanner(resp.Body)}
}

func (e *events) next(v any) {
	e.t.Helper()
	for e.sc.Scan() {
		if data, ok := strings.CutPrefix(e.sc.Text(), "data: "); ok {
			must.NoError(e.t, json.Unmarshal([]byte(data), v))
			return
		}
	}
	e.t.Fatalf("event stream ended: %v", e.sc.Err())
}

// A run page's stream: a snapshot first (reset, every record, the
// checkpoints that exist), then only what is new; checkpoints retention
// deleted drop out of the list.
func TestRunEvents(t *testing.T) {
	root := t.TempDir()
	run, err := storage.Open(root, "r", storage.Policy{NumToKeep: 1})
	must.NoError(t, err)
	defer run.Close()
	appendSteps(t, run, 1)
	commit(t, run, 2, 0.5)
	hs := newTestServer(t, Options{Root: root})

	ev := openEvents(t, hs.URL, "/api/run/events?key=r")
	var u RunUpdate
	ev.next(&u)
	must.True(t, u.Reset)
	must.EqOp(t, "r", u.Name)
	must.SliceLen(t, 2, u.Records)
	must.EqOp(t, 0.5, u.Records[1].Metrics["loss"])
	must.NotNil(t, u.Checkpoints)
	must.SliceLen(t, 1, *u.Checkpoints)
	must.EqOp(t, "checkpoint_000000", (*u.Checkpoints)[0].Name)

	commit(t, run, 3, 0.25) // retention deletes checkpoint_000000
	u = RunUpdate{}
	ev.next(&u)
	must.False(t, u.Reset)
	must.SliceLen(t, 1, u.Records)
	must.EqOp(t, int64(3), u.Records[0].Step)
	// The stream may look between the commit's record and the deletion.
	for u.Checkpoints == nil || len(*u.Checkpoints) != 1 {
		u = RunUpdate{}
		ev.next(&u)
		must.SliceEmpty(t, u.Records)
	}
	must.EqOp(t, "checkpoint_000001", (*u.Checkpoints)[0].Name)

	must.NoError(t, storage.MarkFailed(root, "r", storage.Failure{Reason: "boom", ExitCode: 3}))
	u = RunUpdate{}
	ev.next(&u)
	must.NotNil(t, u.Failure)
	must.EqOp(t, "boom", u.Failure.Reason)
}

// Keys name directories under the storage path and nothing outside it.
func TestKeysStayUnderTheRoot(t *testing.T) {
	root := t.TempDir()
	must.NoError(t, os.MkdirAll(filepath.Join(root, "exp", "t1"), 0o755))
	hs := newTestServer(t, Options{Root: root})
	for _, key := range []string{"", "..", "../etc", "exp/../..", "/etc", ".hidden", "exp/.staging-x", `exp\t1`, "exp//t1", "exp/"} {
		t.Run(key, func(t *testing.T) {
			resp, err := http.Get(hs.URL + "/api/run/events?key=" + url.QueryEscape(key))
			must.NoError(t, err)
			resp.Body.Close()
			must.EqOp(t, http.StatusNotFound, resp.StatusCode)
		})
	}
	resp, err := http.Get(hs.URL + "/api/experiment/events?key=exp")
	must.NoError(t, err)
	resp.Body.Close()
	must.EqOp(t, http.StatusNotFound, resp.StatusCode) // a directory, but no experiment
}

// writeState writes an experiment state file as the tuner writes it.
func writeState(t *testing.T, dir string, st tune.ExperimentState) {
	t.Helper()
	b, err := json.Marshal(st)
	must.NoError(t, err)
	must.NoError(t, os.MkdirAll(dir, 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(dir, tune.StateFile), b, 0o644))
}

// The runs page lists runs (with their step, last metrics, restarts and
// whether they failed) and experiments (trials by status).
func TestRunsList(t *testing.T) {
	root := t.TempDir()
	now := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	run, err := storage.Open(root, "a", storage.Policy{})
	must.NoError(t, err)
	must.NoError(t, run.Append(storage.Record{Step: 1, Time: now, Generation: 1, Metrics: map[string]any{"loss": 2.0}}))
	must.NoError(t, run.Append(storage.Record{Step: 2, Time: now, Generation: 2, Metrics: map[string]any{"loss": 1.0, "note": "x"}}))
	must.NoError(t, run.Close())
	must.NoError(t, storage.MarkFailed(root, "a", storage.Failure{Reason: "boom"}))
	writeState(t, filepath.Join(root, "exp"), tune.ExperimentState{Version: 1, Name: "exp", Trials: []*tune.TrialState{
		{ID: "t1", Status: tune.StatusRunning, Config: map[string]any{}},
		{ID: "t2", Status: tune.StatusStopped, Config: map[string]any{}},
	}})
	must.NoError(t, os.MkdirAll(filepath.Join(root, "not-a-run"), 0o755))
	// A run launched from this machine: its launcher's state says how it
	// stands, not the age of its last report.
	run, err = storage.Open(root, "b", storage.Policy{})
	must.NoError(t, err)
	must.NoError(t, run.Append(storage.Record{Step: 1, Time: now, Generation: 1, Metrics: map[string]any{"loss": 2.0}}))
	must.NoError(t, run.Close())
	b, err := json.Marshal(launch.State{Run: "b", Phase: launch.PhaseComplete})
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(root, "b", launch.StateFile), b, 0o644))
	hs := newTestServer(t, Options{Root: root, Now: func() time.Time { return now }})

	resp, err := http.Get(hs.URL + "/api/runs")
	must.NoError(t, err)
	defer resp.Body.Close()
	var runs []RunSummary
	must.NoError(t, json.NewDecoder(resp.Body).Decode(&runs))
	byKey := map[string]RunSummary{}
	for _, r := range runs {
		byKey[r.Key] = r
	}
	must.MapLen(t, 3, byKey)
	must.EqOp(t, "complete", byKey["b"].State) // its last report is fresh: it was guessed "running"
	a := byKey["a"]
	must.EqOp(t, "failed", a.State)
	must.EqOp(t, int64(2), a.Step)
	must.EqOp(t, 1, a.Restarts)
	must.Eq(t, map[string]float64{"loss": 1}, a.Metrics)
	exp := byKey["exp"]
	must.EqOp(t, "experiment", exp.Kind)
	must.EqOp(t, "1 running, 1 stopped", exp.State)
}

// A run that leaves the storage path (deleted, moved aside) leaves the
// list, and its follower is closed: the dashboard holds nothing of it.
func TestRunsListForgetsGoneRuns(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"a", "b"} {
		run, err := storage.Open(root, name, storage.Policy{})
		must.NoError(t, err)
		appendSteps(t, run, 1)
		must.NoError(t, run.Close())
	}
	s, err := New(context.Background(), Options{Root: root})
	must.NoError(t, err)
	keys := func() []string {
		t.Helper()
		list, err := s.listStorage(context.Background())
		must.NoError(t, err)
		var out []string
		for _, r := range list {
			out = append(out, r.Key)
		}
		slices.Sort(out)
		return out
	}
	must.Eq(t, []string{"a", "b"}, keys())
	must.MapLen(t, 2, s.summaries)
	must.NoError(t, os.RemoveAll(filepath.Join(root, "b")))
	must.Eq(t, []string{"a"}, keys())
	must.MapLen(t, 1, s.summaries)
	must.MapContainsKey(t, s.summaries, "a")
}

// An experiment's stream: the trial table, then each trial's records as
// they come.
func TestExperimentEvents(t *testing.T) {
	dir := t.TempDir()
	writeState(t, dir, tune.ExperimentState{Version: 1, Name: "exp", Trials: []*tune.TrialState{
		{ID: "t1", Status: tune.StatusRunning, Config: map[string]any{"lr": 0.1}},
		{ID: "t2", Status: tune.StatusStopped, Reason: "asha", Config: map[string]any{"lr": 0.01}},
	}})
	t1, err := storage.Open(dir, "t1", storage.Policy{})
	must.NoError(t, err)
	defer t1.Close()
	appendSteps(t, t1, 1, 2)
	hs := newTestServer(t, Options{Root: dir})

	ev := openEvents(t, hs.URL, "/api/experiment/events?key=.")
	var u ExperimentUpdate
	ev.next(&u)
	must.EqOp(t, "exp", u.Name)
	must.SliceLen(t, 2, u.Trials)
	must.EqOp(t, "asha", u.Trials[1].Reason)
	must.SliceLen(t, 2, u.Records["t1"].Records)
	must.MapNotContainsKey(t, u.Records, "t2")

	appendSteps(t, t1, 3)
	u = ExperimentUpdate{}
	ev.next(&u)
	must.SliceEmpty(t, u.Trials) // unchanged
	must.SliceLen(t, 1, u.Records["t1"].Records)
}

// The page and its vendored chart library are served from the binary.
func TestAssetsEmbedded(t *testing.T) {
	hs := newTestServer(t, Options{Root: t.TempDir()})
	for _, p := range []string{"/", "/assets/app.js", "/assets/uPlot.iife.min.js", "/assets/uPlot.min.css"} {
		resp, err := http.Get(hs.URL + p)
		must.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		must.EqOp(t, http.StatusOK, resp.StatusCode, must.Sprint(p))
		must.Positive(t, len(b))
	}
}

// With Nomad, the runs page lists the nomad-train jobs, and a job's page
// shows its workers and, where its storage path is mounted here, its curves.
func TestNomadRun(t *testing.T) {
	root := t.TempDir()
	run, err := storage.Open(root, "r", storage.Policy{})
	must.NoError(t, err)
	defer run.Close()
	appendSteps(t, run, 1)
	srv := nomadtest.New(t)
	job := api.NewBatchJob("r", "r", "", 50)
	job.Meta = map[string]string{trainspec.MetaRun: "r", trainspec.MetaStoragePath: root}
	job.TaskGroups = []*api.TaskGroup{api.NewTaskGroup(trainspec.WorkerGroup, 2)}
	srv.AddJob(job)
	srv.AddJob(api.NewServiceJob("web", "web", "", 50)) // not a training run
	srv.Script("r", []nomadtest.Step{nomadtest.Allocations("r", 2, 10, api.AllocClientStatusRunning, api.AllocDesiredStatusRun)})
	c, err := nomad.NewClient(nomad.Config{Address: srv.URL})
	must.NoError(t, err)
	hs := newTestServer(t, Options{Nomad: c})

	resp, err := http.Get(hs.URL + "/api/runs")
	must.NoError(t, err)
	var runs []RunSummary
	must.NoError(t, json.NewDecoder(resp.Body).Decode(&runs))
	resp.Body.Close()
	must.SliceLen(t, 1, runs)
	must.EqOp(t, "r", runs[0].JobID)
	must.EqOp(t, "nomad", runs[0].Kind)

	ev := openEvents(t, hs.URL, "/api/run/events?job=r")
	var u RunUpdate
	ev.next(&u)
	must.SliceLen(t, 1, u.Records)
	must.NotNil(t, u.Nomad)
	must.SliceLen(t, 2, u.Nomad.Workers)
	must.EqOp(t, api.AllocClientStatusRunning, u.Nomad.Workers[1].ClientStatus)
	must.EqOp(t, 1, u.Nomad.Workers[1].Rank)
}

// FuzzLocalDir: whatever key a page sends, it resolves to the root or a
// directory under it, never to one outside, nor to a scratch (dot) name.
func FuzzLocalDir(f *testing.F) {
	for _, k := range []string{".", "r", "exp/trial_0001", "..", "../x", "a/../b", "/etc", ".staging-1", `a\b`, "a//b", ""} {
		f.Add(k)
	}
	root := f.TempDir()
	s := &Server{root: root}
	f.Fuzz(func(t *testing.T, key string) {
		dir, err := s.localDir(key)
		if err != nil {
			return
		}
		rel, err := filepath.Rel(root, dir)
		if err != nil || !filepath.IsLocal(rel) && rel != "." {
			t.Fatalf("key %q resolved to %q, outside %q", key, dir, root)
		}
		for _, part := range strings.Split(filepath.ToSlash(rel), "/") {
			if rel != "." && strings.HasPrefix(part, ".") {
				t.Fatalf("key %q resolved to a scratch name %q", key, dir)
			}
		}
	})
}

// The dashboard may be opened before any run wrote to the storage path:
// it lists nothing until one does, then lists it.
func TestRootNotThereYet(t *testing.T) {
	root := filepath.Join(t.TempDir(), "results")
	hs := newTestServer(t, Options{Root: root})
	list := func() []RunSummary {
		resp, err := http.Get(hs.URL + "/api/runs")
		must.NoError(t, err)
		defer resp.Body.Close()
		must.EqOp(t, http.StatusOK, resp.StatusCode)
		var runs []RunSummary
		must.NoError(t, json.NewDecoder(resp.Body).Decode(&runs))
		return runs
	}
	must.SliceEmpty(t, list())
	run, err := storage.Open(root, "r", storage.Policy{})
	must.NoError(t, err)
	defer run.Close()
	appendSteps(t, run, 1)
	must.SliceLen(t, 1, list())
}

// FuzzRunAt: on an object store too, a key resolves to a run under the
// storage path, one level or more down, never above it nor to a scratch
// (dot) name.
func FuzzRunAt(f *testing.F) {
	for _, k := range []string{"r", "exp/trial_0001", "..", "../x", "a/../b", "/etc", ".staging-1", `a\b`, "a//b", "", "."} {
		f.Add(k)
	}
	const root = "s3://bucket/runs"
	s := &Server{root: root, remote: true}
	f.Fuzz(func(t *testing.T, key string) {
		parent, name, err := s.runAt(key)
		if err != nil {
			return
		}
		full := parent + "/" + name
		rel, ok := strings.CutPrefix(full, root+"/")
		if !ok || rel != key {
			t.Fatalf("key %q resolved to %q, not under %q", key, full, root)
		}
		for _, part := range strings.Split(rel, "/") {
			if part == "" || strings.HasPrefix(part, ".") {
				t.Fatalf("key %q resolved to a scratch or empty name in %q", key, full)
			}
		}
	})
}
