package nomad

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainspec"
)

// TestE2EAgent checks the Client against a real Nomad agent: a gang that
// cannot fit is refused by its plan before anything is registered, the
// secret variable round-trips, and runs are listed.
func TestE2EAgent(t *testing.T) {
	if os.Getenv("NOMAD_ADDR") == "" {
		t.Skip("set NOMAD_ADDR to check the Nomad client against a real agent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := NewClient(Config{})
	must.NoError(t, err)

	id := "nomad-train-e2e-" + time.Now().UTC().Format("150405")
	job := testJob(id, 2)
	job.TaskGroups[0].Tasks[0].Resources = &api.Resources{MemoryMB: new(1 << 30)} // 1 PiB: never fits
	_, err = Submit(ctx, c, job, SubmitOptions{})
	must.ErrorIs(t, err, ErrInsufficientCapacity)
	_, err = c.JobInfo(ctx, id)
	must.ErrorIs(t, err, ErrNoSuchRun)

	secret, err := NewSecret()
	must.NoError(t, err)
	must.NoError(t, c.PutVariable(ctx, &api.Variable{Path: trainspec.SecretVariablePath(id), Items: api.VariableItems{trainspec.SecretItem: secret}}))
	must.NoError(t, c.DeleteVariable(ctx, trainspec.SecretVariablePath(id), ""))
	must.NoError(t, c.DeleteVariable(ctx, trainspec.SecretVariablePath(id), ""), must.Sprint("deleting twice is fine"))

	_, err = ListRuns(ctx, c)
	must.NoError(t, err)
}
