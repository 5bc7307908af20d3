package trainer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// B13 measures an elastic gang's shrink: from a SIGKILL of one of 3
// workers of a gang of 2..3 (min+1) to the first step the two survivors
// complete at the smaller size, from their latest state, without waiting
// for the replacement (held back here until the survivors are done, when
// it finds the gang finished and exits). B5's scenario (a fixed gang of 2,
// which waits for its replacement) runs in the same benchmark, and
// b13/b5 is reported (goal ≤ 1).
func BenchmarkB13ElasticShrink(b *testing.B) {
	if workerenv.IsWorker() && os.Getenv(workerenv.RunName) == "b13" {
		holdReplacement(os.Getenv("B5_DIR"))
	}
	run := func(name string, scaling trainer.Scaling) time.Duration {
		dir := os.Getenv("B5_DIR") // set in worker processes
		if !workerenv.IsWorker() {
			dir = b.TempDir()
			b.Setenv("B5_DIR", dir)
		}
		tr := trainer.New(b5Train, scaling,
			trainer.Run{Name: name, StoragePath: dir, Failure: trainer.FailureConfig{MaxFailures: 1}}, nil)
		tr.Args = []string{"-test.run=^$", "-test.bench=^" + b.Name() + "$", "-test.benchtime=1x"}
		var out bytes.Buffer
		tr.Stdout, tr.Stderr = io.Discard, &out
		done := make(chan error, 1)
		go func() { _, err := tr.Fit(context.Background()); done <- err }()
		_, rec := b5Measure(b, dir)
		if err := <-done; err != nil {
			b.Fatalf("%s: %v\n%s", name, err, out.String())
		}
		return rec
	}
	for i := 0; i < b.N; i++ {
		fixed := run("b5", trainer.Scaling{NumWorkers: 2})
		elastic := run("b13", trainer.Scaling{Min: 2, Max: 3, Settle: 2 * time.Second})
		if w := firstWorldAfterKill(b, os.Getenv("B5_DIR")); w != 2 {
			b.Fatalf("the first step after the kill ran at world size %d, not 2", w)
		}
		b.ReportMetric(float64(elastic.Milliseconds()), "b13-ms")
		b.ReportMetric(float64(fixed.Milliseconds()), "b5-ms")
		b.ReportMetric(float64(elastic)/float64(fixed), "b13/b5")
	}
}

// holdReplacement keeps a replacement worker process of the elastic run
// (one whose rank already started a process in dir) out of the gang for
// 5 s.
func holdReplacement(dir string) {
	marker := filepath.Join(dir, "started-"+os.Getenv(workerenv.MemberID))
	if _, err := os.Stat(marker); err == nil {
		time.Sleep(5 * time.Second)
		return
	}
	os.WriteFile(marker, nil, 0o644)
}

// firstWorldAfterKill is the world size of the first step a later attempt
// logged in dir (see b5Train).
func firstWorldAfterKill(b *testing.B, dir string) int {
	raw, err := os.ReadFile(filepath.Join(dir, "steps"))
	if err != nil {
		b.Fatal(err)
	}
	first := int64(-1)
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var attempt, step, at, world int64
		if n, _ := fmt.Sscan(l, &attempt, &step, &at, &world); n != 4 {
			continue
		}
		if first < 0 {
			first = attempt
		}
		if attempt != first {
			return int(world)
		}
	}
	return 0
}
