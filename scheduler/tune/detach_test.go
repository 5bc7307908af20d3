package tune

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/trainspec"
)

const detachSpec = `train "exp" {
  entrypoint { builtin = "quickstart" }
  config = {
    lr     = loguniform(1e-4, 1)
    epochs = 4
    note   = "{{ not a template }}"
  }
  run { storage_path = "/srv/shared/results" }
  tune {
    num_samples = 4
    metric      = "loss"
    mode        = "min"
  }
}
`

func parseDetachSpec(t *testing.T, src string) *trainspec.Spec {
	t.Helper()
	spec, diags := trainspec.Parse([]byte(src), "train.hcl", trainspec.ParseOptions{Builtins: []string{"quickstart"}})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	return spec
}

// The detached tuner's job, as registered: testdata/tuner-job.golden.json
// (go test -run TestTunerJobGolden -update rewrites it).
func TestTunerJobGolden(t *testing.T) {
	job, err := TunerJob(DetachOptions{Spec: parseDetachSpec(t, detachSpec), Source: []byte(detachSpec),
		Args: []string{"-var", "x=1"}, Namespace: "ml", ConsulAddress: DefaultTunerConsul})
	must.NoError(t, err)
	got, err := json.MarshalIndent(job, "", "  ")
	must.NoError(t, err)
	got = append(got, '\n')
	golden := filepath.Join("testdata", "tuner-job.golden.json")
	if *update {
		must.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	must.NoError(t, err)
	must.EqOp(t, string(want), string(got))
	// The spec reaches the task verbatim, "{{" and all.
	tmpl := job.TaskGroups[0].Tasks[0].Templates[0]
	must.EqOp(t, detachSpec, *tmpl.EmbeddedTmpl)
	must.StrNotContains(t, detachSpec, *tmpl.LeftDelim)
}

// The tuner reaches Consul only for trials that rendezvous there: with
// the embedded store there are no keys to clear.
func TestTunerJobConsulOnlyForConsulTrials(t *testing.T) {
	embedded := strings.Replace(detachSpec, "  tune {", "  rendezvous { backend = \"embedded\" }\n  tune {", 1)
	for src, want := range map[string]string{detachSpec: DefaultTunerConsul, embedded: ""} {
		job, err := TunerJob(DetachOptions{Spec: parseDetachSpec(t, src), Source: []byte(src), ConsulAddress: DefaultTunerConsul})
		must.NoError(t, err)
		must.EqOp(t, want, job.TaskGroups[0].Tasks[0].Env["CONSUL_HTTP_ADDR"])
	}
	job, err := TunerJob(DetachOptions{Spec: parseDetachSpec(t, detachSpec), Source: []byte(detachSpec)})
	must.NoError(t, err)
	_, set := job.TaskGroups[0].Tasks[0].Env["CONSUL_HTTP_ADDR"]
	must.False(t, set, must.Sprint("no address given: none set"))
}

func TestTunerJobRefuses(t *testing.T) {
	for _, c := range []struct {
		name, src string
		o         DetachOptions
		want      string
	}{
		{"relative storage", strings.Replace(detachSpec, "/srv/shared/results", "results", 1), DetachOptions{}, "absolute path"},
		{"unknown driver", detachSpec, DetachOptions{Driver: "docker"}, "want exec or raw_exec"},
		{"the delimiter in the spec", detachSpec + "# " + specLeftDelim + "\n", DetachOptions{}, "the spec holds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.Spec, c.o.Source = parseDetachSpec(t, c.src), []byte(c.src)
			_, err := TunerJob(c.o)
			must.ErrorContains(t, err, c.want)
		})
	}
	// raw_exec sees the host's storage: no host volume.
	job, err := TunerJob(DetachOptions{Spec: parseDetachSpec(t, detachSpec), Source: []byte(detachSpec), Driver: "raw_exec"})
	must.NoError(t, err)
	must.MapEmpty(t, job.TaskGroups[0].Volumes)
	must.SliceEmpty(t, job.TaskGroups[0].Tasks[0].VolumeMounts)
}

// status's view of a detached experiment: the tuner job's status and the
// experiment's state from the storage its job names.
func TestReadDetached(t *testing.T) {
	srv := nomadtest.New(t)
	c := newNomadClient(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := ReadDetached(ctx, c, "exp")
	must.ErrorIs(t, err, ErrNotDetached)

	storage := t.TempDir()
	src := strings.Replace(detachSpec, "/srv/shared/results", storage, 1)
	job, err := TunerJob(DetachOptions{Spec: parseDetachSpec(t, src), Source: []byte(src)})
	must.NoError(t, err)
	_, err = Detach(ctx, c, job)
	must.NoError(t, err)
	_, err = Detach(ctx, c, job)
	must.ErrorIs(t, err, ErrTunerRunning)
	srv.Script("exp-tuner", []nomadtest.Step{{Allocations: []*api.AllocationListStub{{ID: "a1", JobID: "exp-tuner",
		Name: "exp-tuner.tuner[0]", TaskGroup: TunerGroup, ClientStatus: api.AllocClientStatusRunning,
		DesiredStatus: api.AllocDesiredStatusRun, CreateIndex: 100, ModifyIndex: 100}}, Evaluations: []*api.Evaluation{}}})
	d, err := ReadDetached(ctx, c, "exp")
	must.NoError(t, err)
	must.Nil(t, d.State)
	must.EqOp(t, "running", string(d.Tuner.Phase))
	var text bytes.Buffer
	d.Write(&text)
	must.EqOp(t, "experiment exp: tuner job exp-tuner running, 0 restarts\nno trial table yet in "+filepath.Join(storage, "exp")+"\n", text.String())

	st := &ExperimentState{Version: stateVersion, Name: "exp", Metric: "loss", Mode: ModeMin, Trials: []*TrialState{
		{ID: "trial_0000", Status: StatusRunning, Config: map[string]any{"lr": 0.1}, LastResult: map[string]any{"loss": 0.25}}}}
	b, err := st.encode()
	must.NoError(t, err)
	must.NoError(t, os.MkdirAll(filepath.Join(storage, "exp"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(storage, "exp", StateFile), b, 0o644))
	d, err = ReadDetached(ctx, c, "exp")
	must.NoError(t, err)
	must.NotNil(t, d.State)
	text.Reset()
	d.Write(&text)
	must.StrContains(t, text.String(), "== exp: 1 trial (1 RUNNING)")
	must.StrContains(t, text.String(), "loss") // the metric's column
	must.StrContains(t, text.String(), "\nbest trial trial_0000: loss 0.25, config lr=0.1\n")
}

func newNomadClient(t *testing.T, addr string) *nomad.Client {
	t.Helper()
	c, err := nomad.NewClient(nomad.Config{Address: addr})
	must.NoError(t, err)
	return c
}

// Detaching an experiment whose tuner job ended registers it again, as a
// new version (Nomad runs a finished batch job again only then).
func TestDetachAgainAfterTheTunerEnded(t *testing.T) {
	srv := nomadtest.New(t)
	c := newNomadClient(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job, err := TunerJob(DetachOptions{Spec: parseDetachSpec(t, detachSpec), Source: []byte(detachSpec)})
	must.NoError(t, err)
	_, err = Detach(ctx, c, job)
	must.NoError(t, err)
	must.MapContainsKey(t, srv.Job("exp-tuner").Meta, MetaTunerStarted)
	must.NoError(t, c.Deregister(ctx, "exp-tuner", false))
	_, err = Detach(ctx, c, job)
	must.NoError(t, err)
	n := 0
	for _, r := range srv.Requests() {
		if r == "PUT /v1/jobs" {
			n++
		}
	}
	must.EqOp(t, 2, n)
}

// A tuner that failed and was restarted: status says where and why, with
// no rank (the tuner is one task).
func TestDetachedWriteTunerFailure(t *testing.T) {
	job := &api.Job{ID: new("exp-tuner"), Meta: map[string]string{MetaTuner: "exp"}}
	d := &Detached{Job: job, Tuner: nomad.Status{Phase: nomad.PhaseComplete,
		Failures: []nomad.Failure{{AllocID: "ec5eb0e1-aaaa-bbbb", ExitCode: 137, Reason: "terminated by signal 9"}}},
		State: &ExperimentState{Version: stateVersion, Name: "exp"}}
	var text bytes.Buffer
	d.Write(&text)
	must.StrContains(t, text.String(), "tuner failed: alloc ec5eb0e1: terminated by signal 9 (exit code 137)\n")
	must.StrNotContains(t, text.String(), "rank")
}
