package console

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// list on Nomad counts a tune's trial jobs under their experiment, with
// its detached tuner's job, instead of listing every trial as a run; a
// cluster of experiments alone lists those.
func TestPrintRunsGroupsExperiments(t *testing.T) {
	srv, c, job := jobsFake(t)
	trial := func(n string) {
		job("qs-tune-"+n, map[string]string{trainspec.MetaRun: n, trainspec.MetaExperiment: "qs-tune",
			trainspec.MetaStoragePath: "s3://b/runs/qs-tune"})
	}
	trial("trial_0000")
	trial("trial_0001")
	trial("trial_0002")
	srv.Finish("qs-tune-trial_0000", map[string]api.TaskGroupSummary{"worker": {Complete: 2}})
	srv.Finish("qs-tune-trial_0001", map[string]api.TaskGroupSummary{"worker": {Complete: 2}})
	job("qs-tune-tuner", map[string]string{trainspec.MetaTuner: "qs-tune", trainspec.MetaStoragePath: "s3://b/runs"})

	var b bytes.Buffer
	must.NoError(t, PrintRuns(context.Background(), &b, c))
	must.RegexMatch(t, regexp.MustCompile(`^EXPERIMENT\s+TUNER\s+TRIAL JOBS\s+STATUS\s+STORAGE\n`+
		`qs-tune\s+qs-tune-tuner pending\s+3\s+2 complete, 1 pending\s+s3://b/runs/qs-tune\n$`), b.String())

	job("quickstart", map[string]string{trainspec.MetaRun: "quickstart", trainspec.MetaStoragePath: "/srv/results"})
	b.Reset()
	must.NoError(t, PrintRuns(context.Background(), &b, c))
	must.RegexMatch(t, regexp.MustCompile(`^RUN\s+JOB\s+STATUS\s+STORAGE\nquickstart\s+quickstart\s+pending\s+/srv/results\n\nEXPERIMENT`), b.String())
}

// status of an experiment whose tuner is no Nomad job (tune -address from
// a laptop) finds its trial jobs, and its trial table where they keep it.
func TestPrintNomadExperiment(t *testing.T) {
	srv, c, job := jobsFake(t)
	where := filepath.Join(t.TempDir(), "qs-tune")
	must.NoError(t, os.MkdirAll(where, 0o755))
	st := tune.ExperimentState{Version: 1, Name: "qs-tune", Metric: "loss", Mode: tune.ModeMin, Trials: []*tune.TrialState{
		{ID: "trial_0000", Status: tune.StatusTerminated, Config: map[string]any{"lr": 0.1}, LastResult: map[string]any{"loss": 0.5}},
		{ID: "trial_0001", Status: tune.StatusRunning, Config: map[string]any{"lr": 0.01}, LastResult: map[string]any{"loss": 0.25}},
	}}
	b, err := json.Marshal(st)
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(where, storage.ExperimentStateFile), b, 0o644))
	for _, n := range []string{"trial_0000", "trial_0001"} {
		job("qs-tune-"+n, map[string]string{trainspec.MetaRun: n, trainspec.MetaExperiment: "qs-tune", trainspec.MetaStoragePath: where})
	}
	srv.Finish("qs-tune-trial_0000", map[string]api.TaskGroupSummary{"worker": {Complete: 2}})

	var out bytes.Buffer
	ok, err := PrintNomadExperiment(context.Background(), &out, c, "qs-tune")
	must.NoError(t, err)
	must.True(t, ok)
	must.StrContains(t, out.String(), "experiment qs-tune: 2 trial jobs on Nomad (1 complete, 1 pending), its tuner elsewhere\n")
	must.StrContains(t, out.String(), "== qs-tune: 2 trials (1 RUNNING, 1 TERMINATED)\n")
	must.StrContains(t, out.String(), "best trial trial_0001: loss 0.25, config lr=0.01\n")

	ok, err = PrintNomadExperiment(context.Background(), &out, c, "other")
	must.NoError(t, err)
	must.False(t, ok)
}

// stop <experiment> stops its detached tuner's job first, then each of
// its trial jobs not stopped already; with -purge, every one, and their
// secrets. Another experiment's jobs stay.
func TestStopExperiment(t *testing.T) {
	srv, c, job := jobsFake(t)
	for _, exp := range []string{"a", "b"} {
		for _, n := range []string{"trial_0000", "trial_0001", "trial_0002"} {
			job(exp+"-"+n, map[string]string{trainspec.MetaRun: n, trainspec.MetaExperiment: exp})
		}
	}
	job("a-tuner", map[string]string{trainspec.MetaTuner: "a"})
	must.NoError(t, nomad.Stop(context.Background(), c, "a-trial_0001", "", false))

	var out bytes.Buffer
	found, err := StopExperiment(context.Background(), &out, c, "a", "", false)
	must.NoError(t, err)
	must.True(t, found)
	must.EqOp(t, "experiment a: stopped a-tuner and 2 trial jobs\n", out.String())
	for _, id := range []string{"a-tuner", "a-trial_0000", "a-trial_0001", "a-trial_0002"} {
		stopped, purged := srv.Stopped(id)
		must.True(t, stopped, must.Sprint(id))
		must.False(t, purged, must.Sprint(id))
	}
	for _, id := range []string{"b-trial_0000", "b-trial_0001", "b-trial_0002"} {
		stopped, _ := srv.Stopped(id)
		must.False(t, stopped, must.Sprint(id))
	}

	out.Reset()
	found, err = StopExperiment(context.Background(), &out, c, "b", "", true)
	must.NoError(t, err)
	must.True(t, found)
	must.EqOp(t, "experiment b: stopped and purged 3 trial jobs\n"+
		"  a tuner running off Nomad (tune -address) sees its trials stop: stop it too\n", out.String())
	_, purged := srv.Stopped("b-trial_0002")
	must.True(t, purged)

	found, err = StopExperiment(context.Background(), &out, c, "nope", "", false)
	must.NoError(t, err)
	must.False(t, found)
}

// jobsFake is a fake Nomad, a client of it, and a function that adds a
// batch job with meta to it.
func jobsFake(t *testing.T) (*nomadtest.Server, nomad.API, func(id string, meta map[string]string)) {
	t.Helper()
	srv := nomadtest.New(t)
	c, err := (&nomad.Flags{Address: srv.URL}).Client()
	must.NoError(t, err)
	return srv, c, func(id string, meta map[string]string) {
		j := api.NewBatchJob(id, id, "", 50)
		j.Meta = meta
		srv.AddJob(j)
	}
}
