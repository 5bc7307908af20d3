package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
)

// A tune of the quickstart whose storage is on S3: the trials keep their
// runs in the bucket (nothing of them in a local directory), the tuner
// follows their progress and ranks their checkpoints through storage, and
// the best checkpoint is named by its s3:// location. Run again, the
// tuner resumes the experiment from its state and the trials' records on
// S3, finds every trial finished and writes nothing to the bucket.
func TestTuneQuickstartOnS3(t *testing.T) {
	srv := s3test.Start(t)
	bin := buildCLI(t)
	url := "s3://" + srv.Bucket + "/runs"
	dir, spec := hclSpec(t, fmt.Sprintf(`
train "qs-s3" {
  entrypoint { builtin = "quickstart" }
  scaling { num_workers = 2 }
  config = { lr = grid_search([0.01, 0.05]), epochs = 3, samples = 256 }
  run {
    storage {
      path       = %q
      endpoint   = %q
      region     = %q
      path_style = true
    }
    checkpoint { num_to_keep = 1 }
  }
  tune {
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
    scheduler {
      type             = "asha"
      max_t            = 3
      grace_period     = 1
      reduction_factor = 2
    }
  }
}`, url, srv.Endpoint, srv.Region))
	env := append(os.Environ(), "NOMAD_ADDR=", "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey,
		"AWS_ENDPOINT_URL_S3=", "AWS_ENDPOINT_URL=", "AWS_REGION=", "AWS_PROFILE=",
		"AWS_CONFIG_FILE="+filepath.Join(dir, "none"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "none"),
		"AWS_EC2_METADATA_DISABLED=true")
	tuneOnce := func() string {
		t.Helper()
		cmd := localTune(bin, dir, spec)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		must.NoError(t, err, must.Sprint(string(out)))
		return string(out)
	}
	keys := func() []string {
		t.Helper()
		var out []string
		p := s3.NewListObjectsV2Paginator(srv.Client(t), &s3.ListObjectsV2Input{Bucket: &srv.Bucket})
		for p.HasMorePages() {
			page, err := p.NextPage(context.Background())
			must.NoError(t, err)
			for _, o := range page.Contents {
				out = append(out, *o.Key)
			}
		}
		slices.Sort(out)
		return out
	}

	out := tuneOnce()
	must.StrContains(t, out, "== qs-s3: 2 trials (2 TERMINATED)")
	best := regexp.MustCompile(`(?m)^==> best trial (trial_000\d): loss ([0-9.e-]+), .*\n    checkpoint (\S+)$`).FindStringSubmatch(out)
	must.SliceLen(t, 4, best, must.Sprint(out))
	must.StrHasPrefix(t, url+"/qs-s3/"+best[1]+"/checkpoints/checkpoint_", best[3])
	written := keys()
	must.SliceContains(t, written, "runs/qs-s3/"+best[1]+"/checkpoints/"+filepath.Base(best[3])+"/MANIFEST.json")
	trials, _ := filepath.Glob(filepath.Join(dir, "results", "qs-s3", "trial_*", "progress.jsonl"))
	must.SliceEmpty(t, trials, must.Sprint("the trials' records are on S3, not here"))
	must.FileExists(t, filepath.Join(dir, "results", "qs-s3", "experiment_state.json"))

	again := tuneOnce()
	must.StrContains(t, again, "== qs-s3: 2 trials (2 TERMINATED)")
	must.StrContains(t, again, "==> best trial "+best[1]+": loss "+best[2]+",")
	must.Eq(t, written, keys())
}
