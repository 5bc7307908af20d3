package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
)

// The quickstart keeps its run on S3 (storage_path = "s3://..."), with
// credentials and endpoint only from the AWS environment; run again with
// more epochs, it resumes from the checkpoint on S3 and ends with the
// loss of a run that went straight through on local storage.
func TestRunQuickstartOnS3(t *testing.T) {
	srv := s3test.Start(t)
	bin := buildCLI(t)
	dir := t.TempDir()
	aws := []string{
		"NOMAD_ADDR=",
		"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
		"AWS_REGION=" + srv.Region, "AWS_ENDPOINT_URL_S3=" + srv.Endpoint,
		"AWS_CONFIG_FILE=" + filepath.Join(dir, "none"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "none"),
	}
	run := func(name, storagePath string, epochs int) string {
		t.Helper()
		spec := writeFile(t, dir, name+".hcl", fmt.Sprintf(`
train "qs" {
  entrypoint { builtin = "quickstart" }
  config = { epochs = %d }
  scaling { num_workers = 2 }
  run { storage_path = %q }
}
`, epochs, storagePath))
		cmd := exec.Command(bin, "run", "-local", spec)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), aws...)
		out, err := cmd.CombinedOutput()
		must.NoError(t, err, must.Sprint(string(out)))
		return string(out)
	}
	loss := func(out string) string {
		m := regexp.MustCompile(`(?m)^\s+loss\s+(\S+)$`).FindStringSubmatch(out)
		must.SliceLen(t, 2, m, must.Sprint(out))
		return m[1]
	}
	url := "s3://" + srv.Bucket + "/runs"
	out := run("s3-2", url, 2)
	must.StrContains(t, out, "storage "+url+"/qs\n")
	must.RegexMatch(t, regexp.MustCompile(`checkpoint\s+`+regexp.QuoteMeta(url)+`/qs/checkpoints/checkpoint_`), out)
	out = run("s3-3", url, 3)
	must.StrContains(t, out, "[rank 0] resuming after epoch 1")
	straight := run("fs-3", filepath.Join(dir, "results"), 3)
	must.StrNotContains(t, straight, "resuming")
	must.EqOp(t, loss(straight), loss(out))
	_, err := os.Stat(filepath.Join(dir, "runs"))
	must.True(t, os.IsNotExist(err), must.Sprint("nothing of the S3 run is kept in a local directory"))
}
