package trainspec

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// checkpoint { staging } reaches the task config and the workers'
// policy; a value it does not know, or memory staging for a run kept in
// a directory, is an error at its line.
func TestCheckpointStaging(t *testing.T) {
	src := func(path, staging string) string {
		return "train \"r\" {\n  entrypoint { builtin = \"quickstart\" }\n  run {\n    storage_path = \"" + path +
			"\"\n    checkpoint {\n      staging = \"" + staging + "\"\n    }\n  }\n}\n"
	}
	spec, diags := Parse([]byte(src("s3://bkt/p", "memory")), "t.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	must.EqOp(t, workerenv.StagingMemory, spec.Run.Checkpoint.Policy().Staging)
	job, diags := Compile(spec)
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	ckpt := job.TaskGroups[0].Tasks[0].Config["checkpoint"].([]map[string]any)[0]
	must.EqOp(t, "memory", ckpt["staging"].(string))

	for _, tc := range []struct{ path, staging, want string }{
		{"s3://bkt/p", "ram", `t.hcl:6:17-6:22: error: Invalid value; staging must be one of "disk" or "memory"; got "ram".`},
		{"/data/runs", "memory", `t.hcl:6:7-6:25: error: Staging in memory needs an object store`},
	} {
		_, diags := Parse([]byte(src(tc.path, tc.staging)), "t.hcl", ParseOptions{})
		must.True(t, diags.HasErrors())
		must.StrContains(t, diagLines(diags)[0], tc.want)
	}
	_, diags = Parse([]byte(src("/data/runs", "disk")), "t.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
}
