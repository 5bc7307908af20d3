package trainspec

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
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
		{"plain storage_path", `storage_path = "s3://bkt/p"`, "nomad/jobs/r/worker"},
		{"storage block", `storage { path = "s3://bkt/p" }`, "nomad/jobs/r/worker"},
		{"named variable", `storage {
  path = "s3://bkt/p"
  credentials_variable = "shared/s3"
}`, "shared/s3"},
		{"node credentials", `storage {
  path = "s3://bkt/p"
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

// Compile warns what the train driver makes of each volume: the one that
// holds storage_path is rebased there and needs no warning (before, every
// host volume was "seen at the client's path" and every CSI volume
// refused); any other is found at its host path, which NOMAD_TRAIN_MOUNTS
// gives.
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
  run { storage_path = "%s" }
}
`
	cases := []struct {
		storage string
		want    []string
	}{
		{"/mnt/shared/results", []string{
			"t.hcl:8:3-8:13: warning: Volume seen at its host path; The train driver runs workers without filesystem isolation: it moves only storage_path and resume_from from under a destination onto the volume's path on the client. A worker finds volume \"c\" not at /mnt/csi but at the host_path NOMAD_TRAIN_MOUNTS gives for that destination (JSON; workerenv.HostPathOf in Go).",
		}},
		{"/mnt/csi", []string{
			"t.hcl:3:3-3:13: warning: Volume seen at its host path; The train driver runs workers without filesystem isolation: it moves only storage_path and resume_from from under a destination onto the volume's path on the client. A worker finds volume \"h\" not at /mnt/shared but at the host_path NOMAD_TRAIN_MOUNTS gives for that destination (JSON; workerenv.HostPathOf in Go).",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.storage, func(t *testing.T) {
			spec, diags := Parse([]byte(fmt.Sprintf(src, tc.storage)), "t.hcl", ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
			job, diags := Compile(spec)
			must.Eq(t, tc.want, diagLines(diags))
			mustPassNomadRules(t, job)
			g := job.TaskGroups[0]
			must.MapLen(t, 2, g.Volumes)
			must.EqOp(t, "multi-node-multi-writer", g.Volumes["c"].AccessMode)
			must.SliceLen(t, 2, g.Tasks[0].VolumeMounts)
			must.EqOp(t, "/mnt/shared", *g.Tasks[0].VolumeMounts[0].Destination)
		})
	}
}

// Parse refuses what the train driver would refuse at every worker's
// start: storage on a read-only volume, and a storage_path with ".."
// beside volumes.
func TestStorageOnVolumes(t *testing.T) {
	src := `train "r" {
  entrypoint { builtin = "quickstart" }
  volume "h" {
    type        = "host"
    source      = "nfs"
    destination = "/mnt/shared"
    read_only   = %t
  }
  run { storage_path = "%s" }
}
`
	cases := []struct {
		readOnly bool
		storage  string
		want     []string
	}{
		{true, "/mnt/shared/results", []string{
			"t.hcl:9:9-9:45: error: Storage on a read-only volume; storage_path \"/mnt/shared/results\" is on volume \"h\", mounted read-only at /mnt/shared; checkpoints and progress are written there, so set read_only = false or move storage_path.",
		}},
		{false, "/mnt/shared/../etc", []string{
			"t.hcl:9:9-9:44: error: Storage path with \"..\"; With volumes, the train driver moves a storage_path under a volume's destination onto the volume's path on the client, and it refuses \"/mnt/shared/../etc\" rather than guess whether it leaves the volume; name the directory directly.",
		}},
		{true, "/mnt/other/results", []string{}},
		{false, "/mnt/shared/results", []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.storage, func(t *testing.T) {
			_, diags := Parse([]byte(fmt.Sprintf(src, tc.readOnly, tc.storage)), "t.hcl", ParseOptions{})
			var errs hcl.Diagnostics
			for _, d := range diags {
				if d.Severity == hcl.DiagError {
					errs = append(errs, d)
				}
			}
			must.Eq(t, tc.want, diagLines(errs))
		})
	}
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
    storage { path = "s3://bkt/p" }
  }
  tune { num_samples = 2 }
}
`
	spec, diags := Parse([]byte(src), "t.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	job, diags := CompileTrial(spec, "trial_0001", "s3://bkt/p/exp", []byte(`{"lr":0.1}`))
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	must.StrContains(t, S3CredentialsCommand(job), "nomad var put nomad/jobs/exp/worker ")
	must.EqOp(t, "", spec.Run.Storage.CredentialsVariable)
}

// An endpoint is an http(s) URL of a host, with a port a socket can have,
// and no credentials, query or fragment.
func TestEndpointProblem(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:7070", "https://minio.example", "https://s3.example:443/", "http://[::1]:9000"} {
		must.EqOp(t, "", endpointProblem(ok), must.Sprint(ok))
	}
	for raw, want := range map[string]string{
		"127.0.0.1:7070":           "must be an http:// or https:// URL",
		"ftp://x":                  "must be an http:// or https:// URL",
		"http://":                  "names no host",
		"http://u:p@h":             "holds credentials",
		"http://h/?a=1":            "must have no query or fragment",
		"http://h:99999":           "has port 99999, outside 1 to 65535",
		"http://h:0":               "has port 0, outside 1 to 65535",
		"https://minio.example:00": "has port 00, outside 1 to 65535",
	} {
		must.StrContains(t, endpointProblem(raw), want, must.Sprint(raw))
	}
}
