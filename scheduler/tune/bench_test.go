package tune

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// BenchmarkB7 tunes 64 synthetic trials with a fixed work of 25ms per
// epoch on 2 slots under ASHA (max_t 27, grace 1, η 3), with the in-process
// backend: trials are goroutines writing real progress files and an
// fsynced experiment state, without process start-up (the Processes
// backend pays a process spawn and a rendezvous per trial on top).
//
// It reports makespan/ideal, where ideal is the epochs executed times 25ms
// divided over the 2 slots (goal ≤ 1.10); makespan/worked, where the epochs'
// measured wall time replaces 25ms (on a loaded machine an epoch's timer
// wakes late, which is not the tuner's overhead); and the epochs executed.
func BenchmarkB7(b *testing.B) {
	const (
		work  = 25 * time.Millisecond
		slots = 2
	)
	var ratio, ratioWorked, epochs float64
	for i := 0; i < b.N; i++ {
		var worked atomic.Int64
		tu := New(&InProcess{Fn: syntheticTimed(work, false, nil, &worked), Fsync: storage.FsyncCheckpointRecords},
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
		ratio += makespan.Seconds() / (time.Duration(n) * work / slots).Seconds()
		ratioWorked += makespan.Seconds() / (time.Duration(worked.Load()) / slots).Seconds()
		epochs += float64(n)
	}
	b.ReportMetric(ratio/float64(b.N), "makespan/ideal")
	b.ReportMetric(ratioWorked/float64(b.N), "makespan/worked")
	b.ReportMetric(epochs/float64(b.N), "epochs")
}

// synthTrain is the synthetic trainable as a worker's training function:
// 25ms of fixed work per epoch, no checkpoints, stop requests honoured.
func synthTrain(ctx context.Context, s *trainer.Session) error {
	var cfg synthConfig
	if err := s.DecodeConfig(&cfg); err != nil {
		return err
	}
	for epoch := int64(0); epoch < int64(cfg.Epochs); epoch++ {
		if stop, err := s.ShouldCheckpoint(ctx); err != nil || stop {
			return err
		}
		if err := doWork(ctx, 25*time.Millisecond); err != nil {
			return err
		}
		if err := s.Report(ctx, trainer.Metrics{"loss": synthLoss(cfg.LR, epoch)}, nil); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkB7Processes is B7 on the Processes backend: every trial is a
// worker process of this test binary, so each pays a process start, a
// rendezvous and a stop. It reports makespan/ideal and the start-up cost
// per trial that the excess amounts to.
func BenchmarkB7Processes(b *testing.B) {
	asWorker(synthTrain)
	const (
		work  = 25 * time.Millisecond
		slots = 2
	)
	b.Setenv("GORACE", "atexit_sleep_ms=0")
	var ratio, perTrial float64
	for i := 0; i < b.N; i++ {
		p := NewProcesses(synthTrain, 1)
		p.Args = []string{"-test.run=^$", "-test.bench=^BenchmarkB7Processes$"}
		tu := New(p, lrSpace(27), Config{
			Name: "b7p", StoragePath: b.TempDir(), NumSamples: 64, MaxConcurrentTrials: slots,
			Metric: "loss", Mode: ModeMin, Seed: uint64(i + 1), PollInterval: 5 * time.Millisecond,
			Scheduler: SchedulerConfig{Type: SchedulerASHA, MaxT: 27, GracePeriod: 1, ReductionFactor: 3},
		})
		start := time.Now()
		g, err := tu.Fit(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		makespan := time.Since(start)
		ideal := time.Duration(g.TotalIterations()) * work / slots
		ratio += makespan.Seconds() / ideal.Seconds()
		perTrial += (makespan - ideal).Seconds() * slots / float64(len(g.Trials)) * 1000
	}
	b.ReportMetric(ratio/float64(b.N), "makespan/ideal")
	b.ReportMetric(perTrial/float64(b.N), "overhead-ms/trial")
}
