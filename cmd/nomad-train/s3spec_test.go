package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/scheduler/dashboard"
)

// The storage block names the S3 server, its region and path-style
// addressing; the environment holds only the keys. Both the launcher and
// the workers must reach the server through the block's options (before
// it, only AWS_ENDPOINT_URL_S3 could name a server): the run commits its
// checkpoints there and, run again with more epochs, resumes from them.
// The last launch's config and worker count are kept beside the run on
// S3 (they were kept only in a local run directory).
func TestRunQuickstartWithStorageBlock(t *testing.T) {
	srv := s3test.Start(t)
	bin := buildCLI(t)
	dir := t.TempDir()
	env := keysOnlyEnv(srv, dir)
	url := "s3://" + srv.Bucket + "/runs"
	run := func(epochs int) string {
		t.Helper()
		spec := writeFile(t, dir, fmt.Sprintf("e%d.hcl", epochs), fmt.Sprintf(`
train "qs" {
  entrypoint { builtin = "quickstart" }
  config = { epochs = %d }
  scaling { num_workers = 2 }
  run {
%s  }
}
`, epochs, s3StorageBlock(srv, url)))
		cmd := exec.Command(bin, "run", "-local", spec)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		must.NoError(t, err, must.Sprint(string(out)))
		return string(out)
	}
	out := run(2)
	must.RegexMatch(t, regexp.MustCompile(`checkpoint\s+`+regexp.QuoteMeta(url)+`/qs/checkpoints/checkpoint_`), out)
	// The summary counts the steps from the reports on S3, read through
	// the block's options too.
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    steps +2 \(`), out)
	// The summary's dashboard command passes the block's options on: as
	// printed, with the keys alone in the environment, it lists the run.
	curves := regexp.MustCompile(`(?m)^    curves +nomad-train dashboard (.+), then http`).FindStringSubmatch(out)
	must.SliceLen(t, 2, curves, must.Sprint(out))
	base := startDashboardIn(t, bin, dir, env, strings.Fields(curves[1])...)
	resp, err := http.Get(base + "api/runs")
	must.NoError(t, err)
	var runs []dashboard.RunSummary
	must.NoError(t, json.NewDecoder(resp.Body).Decode(&runs))
	resp.Body.Close()
	must.SliceLen(t, 1, runs, must.Sprint(curves[1]))
	must.EqOp(t, "qs", runs[0].Key)
	out = run(3)
	must.StrContains(t, out, "[rank 0] resuming after epoch 1")
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    steps +1 \(`), out)
	// The notes of the last launch are on S3 too: the changed config was
	// noticed above, and the same spec again has nothing to train.
	must.StrContains(t, out, "the config changed since the last run (epochs 2 → 3)")
	out = run(3)
	must.StrContains(t, out, `run "qs" is complete: nothing to train`)
}

// s3StorageBlock is a run's storage block for url on srv, as a spec's
// run block holds it.
// keysOnlyEnv is the CLI's environment, off Nomad, with the server's keys
// and nothing else of the AWS chain (no endpoint, region, profile, shared
// files or instance role): what reaches the server must come from the
// spec's storage block. dir holds no AWS files.
func keysOnlyEnv(srv *s3test.Server, dir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "NOMAD_ADDR=") {
			env = append(env, kv)
		}
	}
	return append(env, "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey,
		"AWS_CONFIG_FILE="+filepath.Join(dir, "none"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "none"),
		"AWS_EC2_METADATA_DISABLED=true")
}

func s3StorageBlock(srv *s3test.Server, url string) string {
	return fmt.Sprintf("    storage {\n      path       = %q\n      endpoint   = %q\n      region     = %q\n      path_style = true\n    }\n",
		url, srv.Endpoint, srv.Region)
}
