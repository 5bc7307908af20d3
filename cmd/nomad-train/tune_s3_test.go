package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/scheduler/dashboard"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
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
%s    checkpoint { num_to_keep = 1 }
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
}`, s3StorageBlock(srv, url)))
	env := keysOnlyEnv(srv, dir)
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
	must.SliceContains(t, written, "runs/qs-s3/experiment_state.json")
	must.SliceContains(t, written, "runs/qs-s3/results.csv")
	must.SliceNotContains(t, written, "runs/qs-s3/tuner-lease.json", must.Sprint("released at the end"))
	local, _ := filepath.Glob(filepath.Join(dir, "*"))
	must.Eq(t, []string{filepath.Join(dir, "train.hcl")}, local, must.Sprint("the experiment is on S3, nothing of it here"))
	checkDashboardOnS3(t, bin, dir, env, srv, url)

	// status and list read the experiment from the bucket, with the AWS
	// environment.
	s3env := append(slices.Clone(env), "AWS_ENDPOINT_URL_S3="+srv.Endpoint, "AWS_REGION="+srv.Region)
	for _, args := range [][]string{{"status", url + "/qs-s3"}, {"list", url}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = dir, s3env
		got, err := cmd.CombinedOutput()
		must.NoError(t, err, must.Sprint(string(got)))
		if args[0] == "status" {
			must.StrContains(t, string(got), "experiment qs-s3: kept at "+url+"/qs-s3, state of ")
			must.StrContains(t, string(got), "== qs-s3: 2 trials (2 TERMINATED)\n")
			must.StrContains(t, string(got), "best trial "+best[1]+": loss "+best[2]+", config ")
		} else {
			must.RegexMatch(t, regexp.MustCompile(`^EXPERIMENT\s+TRIALS\s+STATUS\s+BEST\s+UPDATED\nqs-s3\s+2\s+2 TERMINATED\s+`+best[1]+` loss=`), string(got))
		}
	}

	again := tuneOnce()
	must.StrContains(t, again, "== qs-s3: 2 trials (2 TERMINATED)")
	must.StrContains(t, again, "==> best trial "+best[1]+": loss "+best[2]+",")
	must.Eq(t, written, keys())

	// The best trial's checkpoint copies out by the location tune printed,
	// the server named by the spec's storage block alone.
	download := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"download", "-spec", spec}, args...)...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	got, err := download(best[3], "model")
	must.NoError(t, err, must.Sprint(got))
	must.MapNotEmpty(t, checkpointFiles(t, filepath.Join(dir, "model")))
	// best of an experiment is its best trial's best checkpoint, the one
	// tune printed; latest means nothing there.
	got, err = download("best", "model2")
	must.NoError(t, err, must.Sprint(got))
	must.StrContains(t, got, best[3])
	must.Eq(t, checkpointFiles(t, filepath.Join(dir, "model")), checkpointFiles(t, filepath.Join(dir, "model2")))
	got, err = download("latest", "model3")
	must.Error(t, err)
	must.StrContains(t, got, "is an experiment: best gives its best trial's best checkpoint")
	must.Eq(t, written, keys())
}

// checkDashboardOnS3: the dashboard of the bucket's storage path lists
// the experiment, read from its state on S3, and streams every trial's
// records; the dashboard of the experiment's own S3 prefix shows it
// alone. The standard AWS environment names the server: the CLI has no
// storage flags.
func checkDashboardOnS3(t *testing.T, bin, dir string, env []string, srv *s3test.Server, url string) {
	t.Helper()
	s3env := append(slices.Clone(env), "AWS_ENDPOINT_URL_S3="+srv.Endpoint, "AWS_REGION="+srv.Region)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	st, ok, err := tune.LoadState(context.Background(), url+"/qs-s3", storage.WithStorageOptions(workerenv.StorageOptions{
		Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}))
	must.NoError(t, err)
	must.True(t, ok)
	must.EqOp(t, url+"/qs-s3", st.TrialStorage)

	for _, c := range []struct{ root, key string }{{url, "qs-s3"}, {url + "/qs-s3", "."}} {
		base := startDashboardIn(t, bin, dir, s3env, c.root)
		resp, err := http.Get(base + "api/runs")
		must.NoError(t, err)
		var runs []dashboard.RunSummary
		must.NoError(t, json.NewDecoder(resp.Body).Decode(&runs))
		resp.Body.Close()
		must.SliceLen(t, 1, runs, must.Sprint(c.root))
		must.EqOp(t, "experiment", runs[0].Kind)
		must.EqOp(t, c.key, runs[0].Key)
		must.EqOp(t, "2 terminated", runs[0].State)

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"api/experiment/events?key="+c.key, nil)
		must.NoError(t, err)
		resp, err = http.DefaultClient.Do(req)
		must.NoError(t, err)
		must.EqOp(t, http.StatusOK, resp.StatusCode)
		sc := bufio.NewScanner(resp.Body)
		var u dashboard.ExperimentUpdate
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				must.NoError(t, json.Unmarshal([]byte(data), &u))
				break
			}
		}
		resp.Body.Close()
		cancel()
		must.SliceLen(t, len(st.Trials), u.Trials)
		for _, ts := range st.Trials {
			must.NotNil(t, u.Records[ts.ID], must.Sprint(ts.ID))
			must.SliceLen(t, ts.Iterations, u.Records[ts.ID].Records, must.Sprint(ts.ID))
		}
	}
}

// startDashboardIn serves `nomad-train dashboard [args]` from dir with env
// on a free port and returns its URL.
func startDashboardIn(t *testing.T, bin, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dashboard", "-listen", "127.0.0.1:0"}, args...)...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.StdoutPipe()
	must.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { stopCLI(t, cmd) })
	line, err := bufio.NewReader(out).ReadString('\n')
	must.NoError(t, err, must.Sprint(stderr.String()))
	m := regexp.MustCompile(`http://\S+/`).FindString(line)
	must.NotEq(t, "", m, must.Sprint(line))
	return m
}
