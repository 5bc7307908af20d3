package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage"
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
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    metrics +`+regexp.QuoteMeta(url)+`/qs/progress/$`), out)
	out = run("s3-3", url, 3)
	must.StrContains(t, out, "[rank 0] resuming after epoch 1")
	straight := run("fs-3", filepath.Join(dir, "results"), 3)
	must.StrNotContains(t, straight, "resuming")
	must.EqOp(t, loss(straight), loss(out))
	_, err := os.Stat(filepath.Join(dir, "runs"))
	must.True(t, os.IsNotExist(err), must.Sprint("nothing of the S3 run is kept in a local directory"))

	// The latest checkpoint comes out of S3 as the files the training
	// function wrote (small ones ride inside the manifest object there),
	// the same bytes as the local run's, whose directory copies out too.
	download := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"download"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), aws...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err = download("-spec", "s3-3.hcl", "latest", "from-s3")
	must.NoError(t, err, must.Sprint(out))
	must.RegexMatch(t, regexp.MustCompile(`^`+regexp.QuoteMeta(url)+`/qs/checkpoints/checkpoint_000002 -> from-s3 `), out)
	out, err = download("-spec", "fs-3.hcl", "latest", "from-fs")
	must.NoError(t, err, must.Sprint(out))
	fromS3, fromFS := checkpointFiles(t, filepath.Join(dir, "from-s3")), checkpointFiles(t, filepath.Join(dir, "from-fs"))
	must.MapNotEmpty(t, fromS3)
	must.Eq(t, fromFS, fromS3)

	// By the location the run printed, with the AWS environment alone;
	// into a directory that is not empty, nothing is written.
	out, err = download(url+"/qs/checkpoints/checkpoint_000001", "by-location")
	must.NoError(t, err, must.Sprint(out))
	out, err = download(url+"/qs/checkpoints/checkpoint_000001", "from-s3")
	must.Error(t, err)
	must.StrContains(t, out, "from-s3 is not empty")
	must.Eq(t, fromS3, checkpointFiles(t, filepath.Join(dir, "from-s3")))
	out, err = download("latest", "x")
	must.Error(t, err)
	must.StrContains(t, out, "add -spec")

	// list and status read a run on S3 from the bucket, by its location or
	// by -storage and name; on the machine that launched it, status shows
	// its launcher and workers too, and logs reads their output, kept in
	// the user's state directory.
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), aws...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err = cli("list", url)
	must.NoError(t, err, must.Sprint(out))
	must.RegexMatch(t, regexp.MustCompile(`(?m)^qs +complete +3 +0 +\d{4}-`), out)
	for _, args := range [][]string{{"status", url + "/qs"}, {"status", "-storage", url, "qs"}} {
		out, err = cli(args...)
		must.NoError(t, err, must.Sprint(out))
		must.RegexMatch(t, regexp.MustCompile(`(?m)^run qs: complete \(local, launcher pid \d+ on `), out)
		must.RegexMatch(t, regexp.MustCompile(`(?m)^1 +\d+ +exited \(0\) +0 +\S+ +`+regexp.QuoteMeta(os.Getenv("XDG_STATE_HOME"))+`/nomad-train/runs/`+srv.Bucket+`-[0-9a-f]{12}/qs/logs/rank-1.log$`), out)
		must.StrContains(t, out, "kept at "+url+"/qs\n")
		must.RegexMatch(t, regexp.MustCompile(`(?m)^last report: step 3 `), out)
		must.StrContains(t, out, "the latest, of step 3: "+url+"/qs/checkpoints/checkpoint_000002\n")
	}
	for _, args := range [][]string{{"logs", url + "/qs"}, {"logs", "-rank", "0", "-storage", url + "/", "qs"}} {
		out, err = cli(args...)
		must.NoError(t, err, must.Sprint(out))
		must.StrContains(t, out, "epoch 2: loss", must.Sprint(args))
	}
	// Another machine has the bucket but not the launcher's files.
	elsewhere := append(aws, "XDG_STATE_HOME="+filepath.Join(dir, "elsewhere"))
	cmd := exec.Command(bin, "status", url+"/qs")
	cmd.Env = append(os.Environ(), elsewhere...)
	b, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(b)))
	must.StrContains(t, string(b), "run qs: kept at "+url+"/qs (its launcher's state and its workers' logs are on the machine that launched it)\n")
	cmd = exec.Command(bin, "list", url)
	cmd.Env = append(os.Environ(), elsewhere...)
	b, err = cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(b)))
	must.RegexMatch(t, regexp.MustCompile(`(?m)^qs +- +3 +- +\d{4}-`), string(b))
	cmd = exec.Command(bin, "logs", url+"/qs")
	cmd.Env = append(os.Environ(), elsewhere...)
	b, err = cmd.CombinedOutput()
	must.Error(t, err)
	must.StrContains(t, string(b), "keeps its workers' logs on the machine that launched it")
}

// checkpointFiles reads the files of a checkpoint directory, its manifest
// (which records when it was written) left out.
func checkpointFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	must.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == storage.ManifestFile {
			return err
		}
		b, err := os.ReadFile(p)
		files[strings.TrimPrefix(p, dir+"/")] = string(b)
		return err
	}))
	_, err := os.Stat(filepath.Join(dir, storage.ManifestFile))
	must.NoError(t, err)
	return files
}

// A run on S3 stopped with Ctrl-C says in its summary how many steps it
// trained (it said 0: its reader of the reports was bound to the run's
// context, which Ctrl-C ends before the summary reads the last report).
func TestRunOnS3InterruptedCountsItsSteps(t *testing.T) {
	srv := s3test.Start(t)
	bin := buildCLI(t)
	dir := t.TempDir()
	spec := writeFile(t, dir, "long.hcl", fmt.Sprintf(`
train "long" {
  entrypoint { builtin = "quickstart" }
  config = { epochs = 100000 }
  scaling { num_workers = 2 }
  run { storage_path = "s3://%s/runs" }
}
`, srv.Bucket))
	cmd := exec.Command(bin, "run", "-local", spec)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=",
		"AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey,
		"AWS_REGION="+srv.Region, "AWS_ENDPOINT_URL_S3="+srv.Endpoint,
		"AWS_CONFIG_FILE="+filepath.Join(dir, "none"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "none"))
	stdout, err := cmd.StdoutPipe()
	must.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "epoch 2: loss") {
			break
		}
	}
	must.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	rest, _ := io.ReadAll(stdout)
	out.Write(rest)
	_ = cmd.Wait()
	must.EqOp(t, 130, cmd.ProcessState.ExitCode(), must.Sprint(out.String(), stderr.String()))
	m := regexp.MustCompile(`(?m)^    steps +(\d+) `).FindStringSubmatch(out.String())
	must.SliceLen(t, 2, m, must.Sprint(out.String()))
	steps, err := strconv.Atoi(m[1])
	must.NoError(t, err)
	must.Greater(t, 2, steps, must.Sprint(out.String()))
}
