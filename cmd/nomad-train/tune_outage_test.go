package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
)

// A tune on S3 whose server is down for 12 s while its trials train (a
// restart of the server): the trials' workers and the tuner retry until
// it is back, so every trial finishes and the tuner ends with its state
// written. The outage spans a renewal of the tuner's lease (every 10 s),
// whose failure used to fail every later write of the state.
func TestTuneThroughAnS3Outage(t *testing.T) {
	srv := s3test.Start(t)
	bin := buildCLI(t)
	url := "s3://" + srv.Bucket + "/runs"
	dir, spec := hclSpec(t, fmt.Sprintf(`
train "outage" {
  entrypoint { builtin = "quickstart" }
  config = { lr = grid_search([0.01, 0.05]), epochs = 600, samples = 256 }
  run {
%s  }
  tune {
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
  }
}`, s3StorageBlock(srv, url)))
	cmd := localTune(bin, dir, spec)
	cmd.Env = keysOnlyEnv(srv, dir)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	must.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	client := srv.Client(t)
	deadline := time.Now().Add(time.Minute)
	for !trialsReported(client, srv.Bucket) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no trial reported:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.Outage(t, 12*time.Second)
	select {
	case err := <-done:
		t.Fatalf("the tune ended (%v) before the server came back: no outage to ride out\n%s", err, out.String())
	default:
	}
	select {
	case err := <-done:
		must.NoError(t, err, must.Sprint(out.String()))
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("tune did not end:\n%s", out.String())
	}
	text := out.String()
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    trials +2 \(0 failed\)$`), text)
	for _, trial := range []string{"trial_0000", "trial_0001"} {
		must.RegexMatch(t, regexp.MustCompile(`(?m)^`+trial+` +TERMINATED +\S+ +600 `), text)
	}
}

// trialsReported says whether both trials of the bucket's experiment have
// a progress segment.
func trialsReported(client *s3.Client, bucket string) bool {
	seen := 0
	for _, trial := range []string{"trial_0000", "trial_0001"} {
		prefix := "runs/outage/" + trial + "/progress/"
		page, err := client.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix})
		if err == nil && len(page.Contents) > 0 {
			seen++
		}
	}
	return seen == 2
}
