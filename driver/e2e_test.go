//go:build e2e

package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainspec"
)

// TestE2EJobOnNomad submits a batch job with driver = "train" to the Nomad
// agent at NOMAD_ADDR, whose clients must have nomad-driver-train in their
// plugin_dir and a plugin "train" {} block (see README.md), and waits for
// the task to finish successfully. The task gets its run secret as a
// compiled job does: a template over the job's Variable.
func TestE2EJobOnNomad(t *testing.T) {
	if os.Getenv("NOMAD_ADDR") == "" {
		t.Skip("NOMAD_ADDR is not set: this test needs a Nomad agent whose clients load nomad-driver-train")
	}
	c, err := api.NewClient(api.DefaultConfig())
	must.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	jobID := fmt.Sprintf("nomad-train-e2e-%d", time.Now().UnixNano())
	task := api.NewTask("worker", PluginName)
	task.Config = map[string]any{
		"command":      "/bin/sh",
		"args":         []string{"-c", `test -s "$NOMAD_TRAIN_SECRET_FILE" && echo "run=$NOMAD_TRAIN_RUN rank=$NOMAD_TRAIN_RANK_HINT"`},
		"launcher":     LauncherDirect,
		"run_name":     "e2e",
		"world_size":   1,
		"storage_path": "/tmp/nomad-train-e2e",
	}
	task.Templates = []*api.Template{trainspec.SecretTemplate(jobID)}
	_, _, err = c.Variables().Create(&api.Variable{Path: trainspec.SecretVariablePath(jobID),
		Items: api.VariableItems{trainspec.SecretItem: strings.Repeat("ab", trainspec.SecretHexLen/2)}}, nil)
	must.NoError(t, err)
	t.Cleanup(func() { _, _ = c.Variables().Delete(trainspec.SecretVariablePath(jobID), nil) })
	job := api.NewBatchJob(jobID, jobID, "global", 50)
	job.Datacenters = []string{"*"}
	tg := api.NewTaskGroup("workers", 1).AddTask(task)
	tg.RestartPolicy = &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	job.AddTaskGroup(tg)
	_, _, err = c.Jobs().Register(job, nil)
	must.NoError(t, err)
	t.Cleanup(func() { _, _, _ = c.Jobs().Deregister(jobID, true, nil) })

	var index uint64
	for {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: 10 * time.Second}).WithContext(ctx)
		allocs, meta, err := c.Jobs().Allocations(jobID, true, q)
		must.NoError(t, err)
		index = meta.LastIndex
		for _, a := range allocs {
			switch a.ClientStatus {
			case api.AllocClientStatusComplete:
				return
			case api.AllocClientStatusFailed, api.AllocClientStatusLost:
				t.Fatalf("allocation %s %s: %+v", a.ID, a.ClientStatus, a.TaskStates)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("job %s did not complete: %v", jobID, ctx.Err())
		}
	}
}

// TestE2EExamplesValidate is `nomad job validate` of every example's
// compiled job, through the API of the agent at NOMAD_ADDR (a tune spec as
// one of its trials). examples/gpu once failed it: an unlimited reschedule
// policy with the default attempts of 1.
func TestE2EExamplesValidate(t *testing.T) {
	if os.Getenv("NOMAD_ADDR") == "" {
		t.Skip("NOMAD_ADDR is not set: this test needs a Nomad agent to validate the examples' jobs")
	}
	c, err := api.NewClient(api.DefaultConfig())
	must.NoError(t, err)
	var specs []string
	err = filepath.WalkDir(filepath.Join("..", "examples"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".hcl") {
			specs = append(specs, path)
		}
		return err
	})
	must.NoError(t, err)
	must.SliceNotEmpty(t, specs)
	for _, path := range specs {
		t.Run(path, func(t *testing.T) {
			spec, diags := trainspec.ParseFile(path, trainspec.ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			var job *api.Job
			if spec.Tune != nil {
				job, diags = trainspec.CompileTrial(spec, "trial_0001", "/mnt/results/"+spec.Name, []byte(`{}`))
			} else {
				job, diags = trainspec.Compile(spec)
			}
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, _, err := c.Jobs().Validate(job, (&api.WriteOptions{}).WithContext(ctx))
			must.NoError(t, err)
			must.Eq(t, "", resp.Error, must.Sprintf("validation errors: %q", resp.ValidationErrors))
			must.SliceEmpty(t, resp.ValidationErrors)
		})
	}
}

func ptr[T any](v T) *T { return &v }
