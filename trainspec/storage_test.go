package trainspec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// An S3 run's workers get their keys from a Variable through a template
// with env = true, or (credentials = "node") from the client; never from
// the job's env or meta. A run kept in a directory gets no template.
func TestS3CredentialsInTheCompiledJob(t *testing.T) {
	cases := []struct {
		name, run string
		wantPath  string // "" for no credentials template
	}{
		{"plain storage_path", `storage_path = "s3://b/p"`, "nomad/jobs/r/worker"},
		{"storage block", `storage { path = "s3://b/p" }`, "nomad/jobs/r/worker"},
		{"named variable", `storage {
  path = "s3://b/p"
  credentials_variable = "shared/s3"
}`, "shared/s3"},
		{"node credentials", `storage {
  path = "s3://b/p"
  credentials = "node"
}`, ""},
		{"directory", `storage { path = "/mnt/results" }`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := "train \"r\" {\n  entrypoint { builtin = \"quickstart\" }\n  run {\n" + c.run + "\n}\n}\n"
			spec, diags := Parse([]byte(src), "t.hcl", ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
			job, diags := Compile(spec)
			must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
			task := job.TaskGroups[0].Tasks[0]
			var creds *api.Template
			for _, tp := range task.Templates {
				if *tp.DestPath == S3CredentialsFile {
					creds = tp
				}
			}
			cmd := S3CredentialsCommand(job)
			if c.wantPath == "" {
				must.Nil(t, creds)
				must.EqOp(t, "", cmd)
				return
			}
			must.NotNil(t, creds)
			must.True(t, *creds.Envvars)
			must.StrContains(t, *creds.EmbeddedTmpl, `nomadVar "`+c.wantPath+`"`)
			must.StrContains(t, *creds.EmbeddedTmpl, "AWS_SECRET_ACCESS_KEY={{ ."+S3SecretKeyItem+" }}")
			must.StrContains(t, cmd, "nomad var put "+c.wantPath+" ")
			for k, v := range task.Env {
				must.False(t, strings.HasPrefix(k, "AWS_"), must.Sprintf("env %s=%s", k, v))
			}
			for k := range job.Meta {
				must.StrNotContains(t, strings.ToLower(k), "key")
			}
		})
	}
}

// Compile warns what the train driver makes of each volume: a CSI volume
// is refused by the Nomad client, a host volume is seen at its host path.
func TestVolumeWarnings(t *testing.T) {
	src := `train "r" {
  entrypoint { builtin = "quickstart" }
  volume "h" {
    type        = "host"
    source      = "nfs"
    destination = "/mnt/shared"
  }
  volume "c" {
    type            = "csi"
    source          = "vol"
    destination     = "/mnt/csi"
    access_mode     = "multi-node-multi-writer"
    attachment_mode = "file-system"
  }
  run { storage_path = "/mnt/shared/results" }
}
`
	spec, diags := Parse([]byte(src), "t.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	job, diags := Compile(spec)
	must.Eq(t, []string{
		"t.hcl:3:3-3:13: warning: Host volume seen at the client's path; The train driver runs workers without filesystem isolation: they see host volume \"h\" at the path the client's host_volume block gives, not at /mnt/shared. Give the host volume that path on every client (host_volume \"nfs\" { path = \"/mnt/shared\" }) so that storage_path means the same everywhere.",
		"t.hcl:8:3-8:13: warning: CSI volume the train driver cannot mount; The train driver takes no mounts yet, so a Nomad client refuses to claim CSI volume \"c\" for its tasks (\"no task supports CSI\"). Mount the filesystem on every client and offer it as a host volume instead.",
	}, diagLines(diags))
	mustPassNomadRules(t, job)
	g := job.TaskGroups[0]
	must.MapLen(t, 2, g.Volumes)
	must.EqOp(t, "multi-node-multi-writer", g.Volumes["c"].AccessMode)
	must.SliceLen(t, 2, g.Tasks[0].VolumeMounts)
	must.EqOp(t, "/mnt/shared", *g.Tasks[0].VolumeMounts[0].Destination)
}

// status reads a job's storage options back from the job, as compiled and
// as Nomad's API returns it (JSON): they reach the CLI's S3 reader.
func TestStorageOptionsOfJob(t *testing.T) {
	job := compileExample(t, "examples/s3/train.hcl")
	want := workerenv.StorageOptions{Endpoint: "http://127.0.0.1:7070", Region: "us-east-1", PathStyle: true}
	must.Eq(t, want, StorageOptionsOf(job))
	js, err := RenderJSON(job)
	must.NoError(t, err)
	var wrapped struct{ Job *api.Job }
	must.NoError(t, json.Unmarshal(js, &wrapped))
	must.Eq(t, want, StorageOptionsOf(wrapped.Job))
	must.Eq(t, workerenv.StorageOptions{}, StorageOptionsOf(compileExample(t, "examples/quickstart/train.hcl")))
}

// Every trial of an experiment on S3 reads the experiment's keys (one
// Variable), not a Variable of its own job; the spec is not changed.
func TestTrialsReadTheExperimentsCredentials(t *testing.T) {
	src := `train "exp" {
  entrypoint { builtin = "quickstart" }
  config = { lr = choice([0.1, 0.2]) }
  run {
    storage { path = "s3://b/p" }
  }
  tune { num_samples = 2 }
}
`
	spec, diags := Parse([]byte(src), "t.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	job, diags := CompileTrial(spec, "trial_0001", "s3://b/p/exp", []byte(`{"lr":0.1}`))
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	must.StrContains(t, S3CredentialsCommand(job), "nomad var put nomad/jobs/exp/worker ")
	must.EqOp(t, "", spec.Run.Storage.CredentialsVariable)
}
