package trainer_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// gatedConfig has the workers of TestMetricsScrapedDuringRun wait, after
// each report, for a file the test makes once it has scraped them: the
// scrapes so fall between steps whatever the machine's speed.
type gatedConfig struct {
	Gate  string `json:"gate"`
	Steps int    `json:"steps"`
}

func gatedTrain(ctx context.Context, s *trainer.Session) error {
	var c gatedConfig
	if err := s.DecodeConfig(&c); err != nil {
		return err
	}
	for step := 1; step <= c.Steps; step++ {
		grad := []float32{float32(s.WorldRank() + step)}
		if err := s.AllReduceFloat32(ctx, grad, trainer.Mean); err != nil {
			return err
		}
		var ckpt *trainer.Checkpoint
		if step == 2 && s.WorldRank() == 0 {
			dir, err := s.NewCheckpointDir()
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "w"), []byte{byte(step)}, 0o644); err != nil {
				return err
			}
			ckpt = trainer.CheckpointFromDirectory(dir)
		}
		if err := s.Report(ctx, trainer.Metrics{"loss": 1 / float64(step), "phase": "train"}, ckpt); err != nil {
			return err
		}
		if err := waitFile(ctx, filepath.Join(c.Gate, strconv.Itoa(step))); err != nil {
			return err
		}
	}
	return nil
}

func waitFile(ctx context.Context, path string) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// gatedSteps is how many steps startGated's run trains.
const gatedSteps = 3

// startGated starts gatedTrain on 2 workers (a worker process runs it and
// exits here) and returns the test's context, the gate directory and rank
// 0's metrics URL. When the test ends every gate opens and the run must
// have ended well.
func startGated(t *testing.T, storagePath string) (context.Context, string, string) {
	t.Helper()
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	gate := t.TempDir()
	tr := trainer.New(gatedTrain, trainer.Scaling{NumWorkers: 2}, trainer.Run{Name: "scraped", StoragePath: storagePath},
		gatedConfig{Gate: gate, Steps: gatedSteps})
	tr.Args = []string{"-test.run=^" + t.Name() + "$", "-test.count=1"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if workerenv.IsWorker() {
		tr.Fit(ctx) // runs gatedTrain and exits
	}
	urls := make(chan []string, 1)
	trainer.SetOnMetrics(t, func(u []string) { urls <- u })
	done := make(chan error, 1)
	go func() { _, err := tr.Fit(ctx); done <- err }()
	t.Cleanup(func() {
		for s := 1; s <= gatedSteps; s++ { // let the workers finish whatever failed
			os.WriteFile(filepath.Join(gate, strconv.Itoa(s)), nil, 0o644)
		}
		must.NoError(t, <-done, must.Sprint(out.String()))
	})
	select {
	case u := <-urls:
		return ctx, gate, u[0]
	case err := <-done:
		done <- err // for the clean-up
		t.Fatalf("the run ended before serving metrics: %v\n%s", err, out.String())
	}
	return nil, "", ""
}

// A worker serves Prometheus metrics while the run trains: scraped between
// steps and parsed with Prometheus's own text parser, its step goes up,
// and its reported metrics, all-reduce and checkpoint-commit times,
// generation and restarts are there with the run and rank labels.
func TestMetricsScrapedDuringRun(t *testing.T) {
	storagePath := t.TempDir()
	ctx, gate, url := startGated(t, storagePath)
	must.EqOp(t, url, waitMetricsURL(ctx, t, filepath.Join(storagePath, "scraped"), 0), must.Sprint("status finds it too"))
	first := scrapeUntil(ctx, t, url, func(mf map[string]*dto.MetricFamily) bool { return gauge(mf, trainer.MetricStep, nil) >= 1 })
	step1 := gauge(first, trainer.MetricStep, nil)
	must.EqOp(t, 1.0, step1)
	must.EqOp(t, 1.0, gauge(first, trainer.MetricReported, map[string]string{"name": "loss"}))
	must.EqOp(t, 1.0, gauge(first, trainer.MetricGeneration, nil))
	must.EqOp(t, 0.0, gauge(first, trainer.MetricRestarts, nil))
	must.MapNotContainsKey(t, first, "nomad_train_metric_phase") // strings are no gauges
	labels := map[string]string{}
	for _, l := range first[trainer.MetricStep].GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	must.Eq(t, map[string]string{"run": "scraped", "rank": "0"}, labels)
	must.Positive(t, first[trainer.MetricAllReduceSeconds].GetMetric()[0].GetHistogram().GetSampleCount())

	must.NoError(t, os.WriteFile(filepath.Join(gate, "1"), nil, 0o644))
	second := scrapeUntil(ctx, t, url, func(mf map[string]*dto.MetricFamily) bool { return gauge(mf, trainer.MetricStep, nil) >= 2 })
	must.Greater(t, step1, gauge(second, trainer.MetricStep, nil))
	must.EqOp(t, 0.5, gauge(second, trainer.MetricReported, map[string]string{"name": "loss"}))
	must.EqOp(t, 2.0, second[trainer.MetricStepsTotal].GetMetric()[0].GetCounter().GetValue())
	must.EqOp(t, uint64(1), second[trainer.MetricCommitSeconds].GetMetric()[0].GetHistogram().GetSampleCount())
}

// waitMetricsURL reads rank's metrics URL from the launcher's state.
func waitMetricsURL(ctx context.Context, t *testing.T, runDir string, rank int) string {
	t.Helper()
	for {
		if st, err := launch.ReadState(runDir); err == nil && len(st.Workers) > rank && st.Workers[rank].Metrics != "" {
			return st.Workers[rank].Metrics
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no metrics URL for rank %d in %s", rank, runDir)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// scrapeUntil scrapes url until ok holds of what it parses.
func scrapeUntil(ctx context.Context, t *testing.T, url string, ok func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	var last error
	for {
		mf, err := scrape(ctx, url)
		if err == nil && ok(mf) {
			return mf
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("scraping %s: %v (last error %v)", url, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err // not listening yet
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// gauge is the value of the gauge name whose labels include want; -1 when
// there is none.
func gauge(mf map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := mf[name]
	if !ok {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m.GetGauge().GetValue()
	}
	return -1
}

// On S3 a worker's metrics also show what checkpointing costs its steps
// and what its store rode out: rank 0's checkpoint report observes its
// wait for the previous upload (none to wait for here: 0), and requests
// retried while the server is down are counted.
func TestStorageMetricsOnS3(t *testing.T) {
	url, srv := s3Server(t)
	ctx, gate, metricsURL := startGated(t, url)
	scrapeUntil(ctx, t, metricsURL, func(mf map[string]*dto.MetricFamily) bool { return gauge(mf, trainer.MetricStep, nil) >= 1 })
	must.NoError(t, os.WriteFile(filepath.Join(gate, "1"), nil, 0o644))
	second := scrapeUntil(ctx, t, metricsURL, func(mf map[string]*dto.MetricFamily) bool { return gauge(mf, trainer.MetricStep, nil) >= 2 })
	wait := second[trainer.MetricUploadWait].GetMetric()[0].GetHistogram()
	must.EqOp(t, uint64(1), wait.GetSampleCount(), must.Sprint("rank 0's one checkpoint report"))
	must.Less(t, 0.5, wait.GetSampleSum())
	must.EqOp(t, 0.0, second[trainer.MetricStorageRetries].GetMetric()[0].GetCounter().GetValue())

	back := make(chan struct{})
	go func() { defer close(back); srv.Outage(t, 2*time.Second) }()
	time.Sleep(200 * time.Millisecond) // the server is down
	must.NoError(t, os.WriteFile(filepath.Join(gate, "2"), nil, 0o644))
	scrapeUntil(ctx, t, metricsURL, func(mf map[string]*dto.MetricFamily) bool {
		f, ok := mf[trainer.MetricStorageRetries]
		return ok && f.GetMetric()[0].GetCounter().GetValue() > 0
	})
	<-back
}
