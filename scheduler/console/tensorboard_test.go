package console

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/internal/tfevents"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

var tbTime = time.Date(2026, 12, 5, 15, 0, 0, 0, time.UTC)

// appendRecords appends records to run under root, a directory.
func appendRecords(t *testing.T, root, run string, recs ...storage.Record) {
	t.Helper()
	r, err := storage.Open(root, run, storage.Policy{})
	must.NoError(t, err)
	for _, rec := range recs {
		must.NoError(t, r.Append(rec))
	}
	must.NoError(t, r.Close())
}

// hasEvents reports, when called, whether run's one event file under out
// holds want events.
func hasEvents(out, run string, want int) func() bool {
	return func() bool {
		paths, _ := filepath.Glob(filepath.Join(out, run, "events.out.tfevents.*"))
		if len(paths) != 1 {
			return false
		}
		b, _ := os.ReadFile(paths[0])
		evs, err := tfevents.Read(bytes.NewReader(b))
		return err == nil && len(evs) == want
	}
}

// readTB reads the one event file of the run exported to dir.
func readTB(t *testing.T, dir string) (string, []tfevents.Event) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	must.NoError(t, err)
	must.Len(t, 1, paths, must.Sprint(dir))
	b, err := os.ReadFile(paths[0])
	must.NoError(t, err)
	evs, err := tfevents.Read(bytes.NewReader(b))
	must.NoError(t, err)
	return paths[0], evs
}

// A storage path's runs and its experiments' trials become event files,
// each report one event of its numbers, at its step and time.
func TestTensorBoardExport(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	appendRecords(t, root, "a",
		storage.Record{Step: 1, Time: tbTime, TimeTotal: 1500 * time.Millisecond, Metrics: map[string]any{
			"loss": 2.0, "acc": 0.5, "eval": map[string]any{"acc": 0.25}, "done": false, "note": "text is left out"}},
		storage.Record{Step: 2, Time: tbTime.Add(time.Second), Metrics: map[string]any{"loss": 1.0, "done": true}})
	writeExperiment(t, filepath.Join(root, "exp"), tune.ExperimentState{Version: 1, Name: "exp", Trials: []*tune.TrialState{
		{ID: "t1", Status: tune.StatusRunning, Config: map[string]any{}},
		{ID: "t2", Status: tune.StatusPending, Config: map[string]any{}},
	}})
	appendRecords(t, filepath.Join(root, "exp"), "t1", storage.Record{Step: 1, Time: tbTime, Metrics: map[string]any{"loss": 3.0}})

	var w strings.Builder
	must.NoError(t, ExportTensorBoard(context.Background(), &w, TensorBoardExport{Source: root, Out: out}))
	must.StrContains(t, w.String(), "a: 2 reports -> "+filepath.Join(out, "a", "events.out.tfevents."))
	must.StrContains(t, w.String(), "exp/t1: 1 report -> ")
	must.StrContains(t, w.String(), "open them with: tensorboard --logdir "+out)
	must.StrNotContains(t, w.String(), "exp/t2:") // nothing reported yet

	path, evs := readTB(t, filepath.Join(out, "a"))
	must.EqOp(t, "events.out.tfevents.1796482800.nomad-train", filepath.Base(path))
	must.Eq(t, []tfevents.Event{
		{Wall: tbTime, Version: tfevents.FileVersion},
		{Wall: tbTime, Step: 1, Scalars: []tfevents.Scalar{{Tag: "acc", Value: 0.5}, {Tag: "done", Value: 0},
			{Tag: "eval/acc", Value: 0.25}, {Tag: "loss", Value: 2}, {Tag: "time_total_s", Value: 1.5}}},
		{Wall: tbTime.Add(time.Second), Step: 2, Scalars: []tfevents.Scalar{{Tag: "done", Value: 1}, {Tag: "loss", Value: 1}}},
	}, evs)
	_, evs = readTB(t, filepath.Join(out, "exp", "t1"))
	must.Len(t, 2, evs)
	_, err := os.Stat(filepath.Join(out, "exp", "t2"))
	must.ErrorIs(t, err, os.ErrNotExist)

	// Exported again after a report: the same file, grown in place, its
	// earlier bytes unchanged, so a TensorBoard reading it reads on.
	before, err := os.ReadFile(path)
	must.NoError(t, err)
	fi, err := os.Stat(path)
	must.NoError(t, err)
	appendRecords(t, root, "a", storage.Record{Step: 3, Time: tbTime.Add(2 * time.Second), Metrics: map[string]any{"loss": 0.5}})
	must.NoError(t, ExportTensorBoard(context.Background(), &w, TensorBoardExport{Source: root, Out: out}))
	after, err := os.ReadFile(path)
	must.NoError(t, err)
	must.True(t, bytes.HasPrefix(after, before))
	fi2, err := os.Stat(path)
	must.NoError(t, err)
	must.True(t, os.SameFile(fi, fi2))
	_, evs = readTB(t, filepath.Join(out, "a"))
	must.Len(t, 4, evs)

	// An experiment's location exports its trials; a run's, the run.
	exp, one := t.TempDir(), t.TempDir()
	must.NoError(t, ExportTensorBoard(context.Background(), &w, TensorBoardExport{Source: filepath.Join(root, "exp"), Out: exp}))
	readTB(t, filepath.Join(exp, "t1"))
	must.NoError(t, ExportTensorBoard(context.Background(), &w, TensorBoardExport{Source: filepath.Join(root, "a"), Out: one}))
	_, evs = readTB(t, filepath.Join(one, "a"))
	must.Len(t, 4, evs)

	// Nothing there: an error that says so, and no file.
	err = ExportTensorBoard(context.Background(), &w, TensorBoardExport{Source: filepath.Join(root, "missing"), Out: one})
	must.ErrorContains(t, err, "no such directory")
	err = ExportTensorBoard(context.Background(), &w, TensorBoardExport{Source: t.TempDir(), Out: one})
	must.ErrorContains(t, err, "holds no reports: no run, experiment or progress records")
}

func writeExperiment(t *testing.T, dir string, st tune.ExperimentState) {
	t.Helper()
	must.NoError(t, os.MkdirAll(dir, 0o755))
	b, err := json.Marshal(st)
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(dir, tune.StateFile), b, 0o644))
}

// Following, the files grow as the run reports; a run started afresh
// (moved aside, run again) gets a new file in place of the old one.
func TestTensorBoardFollow(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	appendRecords(t, root, "a", storage.Record{Step: 1, Time: tbTime, Metrics: map[string]any{"loss": 2.0}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	w := newSyncBuffer()
	go func() {
		done <- ExportTensorBoard(ctx, w, TensorBoardExport{Source: root, Out: out, Follow: true, Interval: 10 * time.Millisecond})
	}()
	events := func(want int) func() bool { return hasEvents(out, "a", want) }
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(events(2)), wait.Timeout(10*time.Second), wait.Gap(10*time.Millisecond)))
	first, _ := readTB(t, filepath.Join(out, "a"))
	appendRecords(t, root, "a", storage.Record{Step: 2, Time: tbTime.Add(time.Second), Metrics: map[string]any{"loss": 1.0}})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(events(3)), wait.Timeout(10*time.Second), wait.Gap(10*time.Millisecond)))

	_, err := launch.MoveAside(filepath.Join(root, "a"), tbTime)
	must.NoError(t, err)
	appendRecords(t, root, "a", storage.Record{Step: 1, Time: tbTime.Add(time.Hour), Metrics: map[string]any{"loss": 9.0}})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		paths, _ := filepath.Glob(filepath.Join(out, "a", "events.out.tfevents.*"))
		return len(paths) == 1 && paths[0] != first && events(2)()
	}), wait.Timeout(10*time.Second), wait.Gap(10*time.Millisecond)))
	_, evs := readTB(t, filepath.Join(out, "a"))
	must.Eq(t, []tfevents.Scalar{{Tag: "loss", Value: 9}}, evs[1].Scalars)

	cancel()
	must.NoError(t, <-done)
	must.StrContains(t, w.String(), "a: 1 report -> ")
}

// Runs on S3 export as those in a directory do, with the storage options
// a spec's storage block would give.
func TestTensorBoardExportS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeysOnly(t)
	root := "s3://" + srv.Bucket + "/runs"
	so := workerenv.StorageOptions{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}
	ctx := context.Background()
	r, err := storage.OpenStore(ctx, root, "qs", storage.Policy{}, storage.WithStorageOptions(so), storage.WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	for i, loss := range []float64{0.5, 0.2} {
		must.NoError(t, r.Append(storage.Record{Step: int64(i), Time: tbTime.Add(time.Duration(i) * time.Second),
			Metrics: map[string]any{"loss": loss}}))
	}
	must.NoError(t, r.Close())

	out := t.TempDir()
	var w strings.Builder
	must.NoError(t, ExportTensorBoard(ctx, &w, TensorBoardExport{Source: root, Storage: so, Out: out}))
	must.StrContains(t, w.String(), "qs: 2 reports -> ")
	_, evs := readTB(t, filepath.Join(out, "qs"))
	must.Len(t, 3, evs)
	must.Eq(t, []tfevents.Scalar{{Tag: "loss", Value: float64(float32(0.2))}}, evs[2].Scalars)

	one := t.TempDir()
	must.NoError(t, ExportTensorBoard(ctx, &w, TensorBoardExport{Source: root + "/qs", Storage: so, Out: one}))
	readTB(t, filepath.Join(one, "qs"))
}

// Following runs on S3, an outage of the store is said once and outlived:
// the reports made after it come in as the server answers again (the
// follow ended at the first failed look).
func TestTensorBoardFollowOutlivesAnOutage(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeysOnly(t)
	root := "s3://" + srv.Bucket + "/runs"
	so := workerenv.StorageOptions{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	appendS3 := func(step int64) {
		r, err := storage.OpenStore(ctx, root, "qs", storage.Policy{}, storage.WithStorageOptions(so), storage.WithLocalDir(t.TempDir()))
		must.NoError(t, err)
		must.NoError(t, r.Append(storage.Record{Step: step, Time: tbTime.Add(time.Duration(step) * time.Second), Metrics: map[string]any{"loss": 1.0}}))
		must.NoError(t, r.Close())
	}
	appendS3(1)
	out := t.TempDir()
	w := newSyncBuffer()
	done := make(chan error, 1)
	go func() {
		done <- ExportTensorBoard(ctx, w, TensorBoardExport{Source: root, Storage: so, Out: out, Follow: true, Interval: 50 * time.Millisecond})
	}()
	events := func(want int) func() bool { return hasEvents(out, "qs", want) }
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(events(2)), wait.Timeout(20*time.Second), wait.Gap(20*time.Millisecond)))
	// Longer than the SDK's three attempts can span (backoffs of at most
	// 2 s and 4 s), so that a look fails rather than retries through it.
	srv.Outage(t, 7*time.Second)
	appendS3(2)
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(events(3)), wait.Timeout(60*time.Second), wait.Gap(20*time.Millisecond)),
		must.Sprint(w.String()))
	cancel()
	must.NoError(t, <-done)
	must.StrContains(t, w.String(), "looking again every 50ms")
	must.StrContains(t, w.String(), "reading the runs again")
}
