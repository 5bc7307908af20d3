package console

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/trainspec"
)

// list on Nomad counts a tune's trial jobs under their experiment, with
// its detached tuner's job, instead of listing every trial as a run; a
// cluster of experiments alone lists those.
func TestPrintRunsGroupsExperiments(t *testing.T) {
	srv := nomadtest.New(t)
	c, err := (&nomad.Flags{Address: srv.URL}).Client()
	must.NoError(t, err)
	job := func(id string, meta map[string]string) {
		j := api.NewBatchJob(id, id, "", 50)
		j.Meta = meta
		srv.AddJob(j)
	}
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
