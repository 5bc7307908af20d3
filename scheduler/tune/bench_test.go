package tune

import (
	"context"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// BenchmarkB7 tunes 64 synthetic trials with a fixed work of 25ms per
// epoch on 2 slots under ASHA (max_t 27, grace 1, η 3), with the in-process
// backend: trials are goroutines writing real progress files and state,
// without process start-up (see Processes for that cost). It reports
// makespan/ideal, where ideal is the epochs executed times the per-epoch
// work divided over the slots (goal ≤ 1.10), and the epochs executed.
func BenchmarkB7(b *testing.B) {
	const (
		work  = 25 * time.Millisecond
		slots = 2
	)
	var ratio, epochs float64
	for i := 0; i < b.N; i++ {
		tu := New(&InProcess{Fn: synthetic(work, false, nil), Fsync: storage.FsyncCheckpointRecords},
			lrSpace(27), Config{
				Name: "b7", StoragePath: b.TempDir(), NumSamples: 64, MaxConcurrentTrials: slots,
				Metric: "loss", Mode: ModeMin, Seed: uint64(i + 1),
				Scheduler: SchedulerConfig{Type: SchedulerASHA, MaxT: 27, GracePeriod: 1, ReductionFactor: 3},
			})
		start := time.Now()
		g, err := tu.Fit(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		makespan := time.Since(start)
		n := g.TotalIterations()
		ideal := time.Duration(n) * work / slots
		ratio += makespan.Seconds() / ideal.Seconds()
		epochs += float64(n)
	}
	b.ReportMetric(ratio/float64(b.N), "makespan/ideal")
	b.ReportMetric(epochs/float64(b.N), "epochs")
}
