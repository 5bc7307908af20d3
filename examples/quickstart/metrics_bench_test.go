package quickstart_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/examples/quickstart"
	"github.com/nomad-train/nomad-train/scheduler/dashboard"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// benchOut names the file rank 0 writes its training time to.
const benchOut = "QUICKSTART_BENCH_OUT"

// timedTrain is the quickstart, timed inside rank 0 from its first step
// to its last (process start-up and rendezvous are the same either way
// and left out).
func timedTrain(ctx context.Context, s *trainer.Session) error {
	start := time.Now()
	if err := quickstart.Train(ctx, s); err != nil {
		return err
	}
	if s.WorldRank() == 0 {
		return os.WriteFile(os.Getenv(benchOut), []byte(strconv.FormatFloat(time.Since(start).Seconds(), 'g', -1, 64)), 0o644)
	}
	return nil
}

// BenchmarkMetricsOverhead measures what watching a run costs the
// quickstart: 4 workers, rounds of one run with Prometheus metrics served
// and a dashboard following it as an open browser does (the run page's
// event stream read throughout, and a runs page beside it polling every
// 2 s, as its script does), and one with neither
// (NOMAD_TRAIN_METRICS_ADDR=off, no dashboard), alternated so that a
// loaded machine slows both alike. Reported: steps/s on ÷ off (the goal
// is ≥ 0.97), and both rates.
func BenchmarkMetricsOverhead(b *testing.B) {
	const rounds, epochs = 3, 30
	cfg := quickstart.DefaultConfig()
	cfg.Epochs = epochs
	steps := float64(epochs * ((cfg.Samples + cfg.BatchSize - 1) / cfg.BatchSize))
	b.Setenv("GORACE", "atexit_sleep_ms=0")
	run := func(metrics bool) float64 {
		root := b.TempDir()
		tr := trainer.New(timedTrain, trainer.Scaling{NumWorkers: 4},
			trainer.Run{Name: "quickstart", StoragePath: root}, cfg)
		tr.Args = []string{"-test.run=^$", "-test.bench=^" + b.Name() + "$", "-test.benchtime=1x"}
		var out bytes.Buffer
		tr.Stdout, tr.Stderr = &out, &out
		if metrics {
			os.Unsetenv(workerenv.MetricsAddr)
		} else {
			os.Setenv(workerenv.MetricsAddr, "off")
		}
		defer os.Unsetenv(workerenv.MetricsAddr)
		outFile := filepath.Join(b.TempDir(), "elapsed")
		os.Setenv(benchOut, outFile)
		if metrics {
			defer watchDashboard(b, root)()
		}
		if _, err := tr.Fit(context.Background()); err != nil {
			b.Fatalf("fit: %v\n%s", err, out.String())
		}
		raw, err := os.ReadFile(outFile)
		if err != nil {
			b.Fatal(err)
		}
		sec, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			b.Fatal(err)
		}
		return sec
	}
	if workerenv.IsWorker() { // runs timedTrain with the launcher's environment and exits
		trainer.New(timedTrain, trainer.Scaling{NumWorkers: 4}, trainer.Run{Name: "quickstart"}, cfg).Fit(context.Background())
	}
	for b.Loop() {
		var on, off float64
		for range rounds {
			off += run(false)
			on += run(true)
		}
		b.ReportMetric(off/on, "on/off")
		b.ReportMetric(steps*rounds/on, "steps/s-on")
		b.ReportMetric(steps*rounds/off, "steps/s-off")
	}
}

// watchDashboard serves a dashboard of the storage path root and follows
// the quickstart run in it as a browser would, until the returned stop is
// called; it fails the benchmark if the dashboard never streamed.
func watchDashboard(b *testing.B, root string) (stop func()) {
	srv, err := dashboard.New(context.Background(), dashboard.Options{Root: root})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	var streamed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the run page's event stream, reconnecting as the page does
		defer wg.Done()
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/api/run/events?key=quickstart", nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				n, _ := io.Copy(io.Discard, resp.Body)
				streamed.Add(n)
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	go func() { // the runs page
		defer wg.Done()
		for {
			if resp, err := http.Get(ts.URL + "/api/runs"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second): // as the runs page polls
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		ts.Close()
		if streamed.Load() == 0 {
			b.Fatal("the dashboard streamed nothing of the run")
		}
	}
}
