package trainspec

import (
	"fmt"
	"testing"

	"github.com/shoenig/test/must"
)

// checkpoint { resume_from } reaches the task config and the workers'
// policy (a file:// URL as its path); a location that is not a
// checkpoint's, a scheme it does not know, or a checkpoint on S3 for a
// run kept in a directory is an error at its line; a relative path is a
// warning on Nomad.
func TestCheckpointResumeFrom(t *testing.T) {
	src := func(path, from string) string {
		return "train \"r\" {\n  entrypoint { builtin = \"quickstart\" }\n  run {\n    storage_path = \"" + path +
			"\"\n    checkpoint {\n      resume_from = \"" + from + "\"\n    }\n  }\n}\n"
	}
	for _, tc := range []struct{ path, from, want string }{
		{"s3://bkt/p", "s3://bkt/p/qs/checkpoints/checkpoint_000019", "s3://bkt/p/qs/checkpoints/checkpoint_000019"},
		{"s3://bkt/p", "s3://other/qs/checkpoints/checkpoint_000001/", "s3://other/qs/checkpoints/checkpoint_000001/"},
		{"/data/runs", "/data/runs/qs/checkpoint_000019", "/data/runs/qs/checkpoint_000019"},
		{"s3://bkt/p", "file:///data/runs/qs/checkpoint_000019", "/data/runs/qs/checkpoint_000019"},
	} {
		spec, diags := Parse([]byte(src(tc.path, tc.from)), "t.hcl", ParseOptions{})
		must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
		must.EqOp(t, tc.want, spec.RunSpec().Checkpoint.ResumeFrom)
		job, diags := Compile(spec)
		must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
		must.SliceEmpty(t, diags, must.Sprint(diagLines(diags)))
		ckpt := job.TaskGroups[0].Tasks[0].Config["checkpoint"].([]map[string]any)[0]
		must.EqOp(t, tc.want, ckpt["resume_from"].(string))
	}

	for _, tc := range []struct{ path, from, want string }{
		{"s3://bkt/p", "s3://bkt/p/qs", `t.hcl:6:21-6:36: error: Not a checkpoint's location; resume_from "s3://bkt/p/qs" is not under a run's checkpoints/`},
		{"s3://bkt/p", "s3://bkt/qs/checkpoints/model.bin", `ends in "model.bin", which is not a checkpoint's name`},
		{"s3://bkt/p", "s3:///qs/checkpoints/checkpoint_000001", `is no valid S3 location (bucket name "" must be 3 to 63 characters)`},
		{"s3://bkt/p", "gs://b/qs/checkpoints/checkpoint_000001", `resume_from: scheme "gs" is not supported`},
		{"/data/runs", "s3://bkt/qs/checkpoints/checkpoint_000001", `t.hcl:6:21-6:64: error: A checkpoint on S3 needs the run on S3; resume_from is on S3 but storage_path "/data/runs" is a directory`},
		{"/data/runs", " ", "resume_from must not be empty"},
	} {
		_, diags := Parse([]byte(src(tc.path, tc.from)), "t.hcl", ParseOptions{})
		must.True(t, diags.HasErrors(), must.Sprint(tc.from))
		must.StrContains(t, diagLines(diags)[0], tc.want)
	}

	spec, diags := Parse([]byte(src("/data/runs", "results/qs/checkpoint_000019")), "t.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	_, diags = Compile(spec)
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	must.Len(t, 1, diags)
	must.StrContains(t, diagLines(diags)[0], "t.hcl:6:7-6:51: warning: Relative resume_from on Nomad")
}

// Beside volumes, resume_from is checked as the train driver will: on a
// read-only volume it is fine (workers only read it), with ".." it is
// refused; and the volume that holds it is not warned about, since the
// driver moves it onto the volume's host path as it does storage.
func TestResumeFromOnVolumes(t *testing.T) {
	src := `train "r" {
  entrypoint { builtin = "quickstart" }
  volume "models" {
    type        = "host"
    source      = "models"
    destination = "/models"
    read_only   = true
  }
  run {
    storage_path = "s3://bkt/p"
    checkpoint { resume_from = "%s" }
  }
}
`
	spec, diags := Parse([]byte(fmt.Sprintf(src, "/models/qs/checkpoint_000019")), "t.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	_, diags = Compile(spec)
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	for _, line := range diagLines(diags) {
		must.StrNotContains(t, line, "Volume seen at its host path")
	}
	_, diags = Parse([]byte(fmt.Sprintf(src, "/models/../etc/checkpoint_000019")), "t.hcl", ParseOptions{})
	must.True(t, diags.HasErrors())
	must.StrContains(t, diagLines(diags)[0], `t.hcl:11:18-11:66: error: resume_from with ".."`)
}
