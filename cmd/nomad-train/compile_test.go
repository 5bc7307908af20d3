package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainspec"
)

// TestCompileSecret: the compiled job carries the template that renders the
// run secret (the same one `run -address` relies on: Submit adds nothing
// more), and the command that stores the secret goes to stderr, never into
// the job.
func TestCompileSecret(t *testing.T) {
	code, out, errOut := runCLI(t, "compile", "-json", quickstart)
	must.Eq(t, 0, code, must.Sprint(errOut))
	var wrapped struct{ Job *api.Job }
	must.NoError(t, json.Unmarshal([]byte(out), &wrapped))
	job := wrapped.Job
	task := job.TaskGroups[0].Tasks[0]
	must.Len(t, 1, task.Templates)
	must.Eq(t, trainspec.SecretDestination, *task.Templates[0].DestPath)

	before, err := trainspec.RenderJSON(job)
	must.NoError(t, err)
	nomad.AddSecretTemplate(job)
	after, err := trainspec.RenderJSON(job)
	must.NoError(t, err)
	must.Eq(t, string(before), string(after), must.Sprint("Submit's template is the one compile emits"))

	must.StrContains(t, errOut, "\n    "+trainspec.SecretCommand(job)+"\n")
	must.StrContains(t, errOut, "nomad/jobs/quickstart")
	must.StrNotContains(t, out, "nomad var put")
	must.False(t, strings.Contains(out, "urandom"))
}
