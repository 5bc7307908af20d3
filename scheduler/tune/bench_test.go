package tune

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
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
	var parts breakdown
	for i := 0; i < b.N; i++ {
		var worked atomic.Int64
		tb := &timedBackend{Backend: &InProcess{Fn: syntheticTimed(work, false, nil, &worked), Fsync: storage.FsyncCheckpointRecords}}
		dir := b.TempDir()
		tu := New(tb,
			lrSpace(27), Config{
				Name: "b7", StoragePath: dir, NumSamples: 64, MaxConcurrentTrials: slots,
				Metric: "loss", Mode: ModeMin, Seed: uint64(i + 1),
				Scheduler: ASHASettings{MaxT: 27, GracePeriod: 1, ReductionFactor: 3},
			})
		start := time.Now()
		g, err := tu.Fit(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		end := time.Now()
		makespan := end.Sub(start)
		n := g.TotalIterations()
		parts.add(tb.breakdown(start, end, slots, n, work, g.Path))
		ratio += makespan.Seconds() / (time.Duration(n) * work / slots).Seconds()
		ratioWorked += makespan.Seconds() / (time.Duration(worked.Load()) / slots).Seconds()
		epochs += float64(n)
	}
	b.ReportMetric(ratio/float64(b.N), "makespan/ideal")
	b.ReportMetric(ratioWorked/float64(b.N), "makespan/worked")
	b.ReportMetric(epochs/float64(b.N), "epochs")
	parts.report(b)
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
// rendezvous and a stop; "prestart" starts the next trials' workers while
// the slots are busy (the default), "cold" when their trial runs. It
// reports makespan/ideal, the cost per trial that the excess amounts to,
// the epochs run, and the breakdown (see breakdown).
func BenchmarkB7Processes(b *testing.B) {
	asWorker(synthTrain)
	b.Setenv("GORACE", "atexit_sleep_ms=0")
	b.Run("prestart", func(b *testing.B) { benchB7Processes(b, false) })
	// cold starts every trial's workers when its trial runs: the same
	// run without Processes' pre-start, for comparison.
	b.Run("cold", func(b *testing.B) { benchB7Processes(b, true) })
}

func benchB7Processes(b *testing.B, cold bool) {
	const (
		work  = 25 * time.Millisecond
		slots = 2
	)
	var ratio, perTrial, epochs float64
	var parts breakdown
	for i := 0; i < b.N; i++ {
		p := NewProcesses(synthTrain, 1)
		p.Args = []string{"-test.run=^$", "-test.bench=^BenchmarkB7Processes$"}
		p.NoPreStart = cold
		// The same durability as the in-process B7: metric records are
		// written at once and flushed with the next checkpoint record.
		p.Env = []string{workerenv.Fsync + "=checkpoints"}
		tb := &timedBackend{Backend: p}
		tu := New(tb, lrSpace(27), Config{
			Name: "b7p", StoragePath: b.TempDir(), NumSamples: 64, MaxConcurrentTrials: slots,
			Metric: "loss", Mode: ModeMin, Seed: uint64(i + 1),
			Scheduler: ASHASettings{MaxT: 27, GracePeriod: 1, ReductionFactor: 3},
		})
		start := time.Now()
		g, err := tu.Fit(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		end := time.Now()
		makespan := end.Sub(start)
		parts.add(tb.breakdown(start, end, slots, g.TotalIterations(), work, g.Path))
		ideal := time.Duration(g.TotalIterations()) * work / slots
		ratio += makespan.Seconds() / ideal.Seconds()
		perTrial += (makespan - ideal).Seconds() * slots / float64(len(g.Trials)) * 1000
		epochs += float64(g.TotalIterations())
	}
	b.ReportMetric(ratio/float64(b.N), "makespan/ideal")
	b.ReportMetric(perTrial/float64(b.N), "overhead-ms/trial")
	b.ReportMetric(epochs/float64(b.N), "epochs")
	parts.report(b)
}

// timedBackend records when every attempt of a trial was placed and when
// its Run returned, to split B7's makespan into where the time went.
type timedBackend struct {
	Backend
	mu    sync.Mutex
	spans []trialSpan // guarded by mu
}

type trialSpan struct {
	trial      string
	start, end time.Time
}

func (tb *timedBackend) Run(ctx context.Context, t TrialSpec) error {
	start := time.Now()
	err := tb.Backend.Run(ctx, t)
	tb.mu.Lock()
	tb.spans = append(tb.spans, trialSpan{t.ID, start, time.Now()})
	tb.mu.Unlock()
	return err
}

// Prepare and Release pass through to a Preparer.
func (tb *timedBackend) Prepare(t TrialSpec) {
	if p, ok := tb.Backend.(Preparer); ok {
		p.Prepare(t)
	}
}

// InProcessReports and SlotFreedOnStop pass through too.
func (tb *timedBackend) InProcessReports() bool {
	r, ok := tb.Backend.(InProcessReports)
	return ok && r.InProcessReports()
}

func (tb *timedBackend) SlotFreedOnStop() bool {
	f, ok := tb.Backend.(SlotFreedOnStop)
	return ok && f.SlotFreedOnStop()
}

// Release passes through to a Preparer.
func (tb *timedBackend) Release() {
	if p, ok := tb.Backend.(Preparer); ok {
		p.Release()
	}
}

// breakdown splits slots*makespan (slot time) into: the epochs' fixed
// work; inside, the rest of the time trials were placed (timer lateness,
// reports, and for process trials start-up and stop); idle slot time while
// trials were still waiting to start (the tuner's hand-over); and the
// tail, idle slot time after the last trial started. Each is a fraction of
// ideal (the fixed work over the slots), so they add up to makespan/ideal.
type breakdown struct {
	inside, pending, tail float64
	startup               time.Duration // mean from placement to the first report, less one epoch
	ending                time.Duration // mean from the last report to Run's return
	between               time.Duration // mean time between a trial's reports, less one epoch
}

func (tb *timedBackend) breakdown(begin, end time.Time, slots, epochs int, work time.Duration, expDir string) breakdown {
	tb.mu.Lock()
	spans := slices.Clone(tb.spans)
	tb.mu.Unlock()
	ideal := float64(time.Duration(epochs)*work) / float64(slots)
	var placed time.Duration
	lastStart := begin
	type ev struct {
		at time.Time
		d  int
	}
	var evs []ev
	for _, sp := range spans {
		placed += sp.end.Sub(sp.start)
		if sp.start.After(lastStart) {
			lastStart = sp.start
		}
		evs = append(evs, ev{sp.start, +1}, ev{sp.end, -1})
	}
	slices.SortFunc(evs, func(a, b ev) int { return a.at.Compare(b.at) })
	var pending, tail time.Duration
	running, at := 0, begin
	idle := func(to time.Time) {
		if !to.After(at) {
			return
		}
		free := time.Duration(max(slots-running, 0))
		if to.After(lastStart) && at.Before(lastStart) {
			pending += free * lastStart.Sub(at)
			tail += free * to.Sub(lastStart)
		} else if at.Before(lastStart) {
			pending += free * to.Sub(at)
		} else {
			tail += free * to.Sub(at)
		}
		at = to
	}
	for _, e := range evs {
		idle(e.at)
		running += e.d
	}
	idle(end)
	var startup, ending, between time.Duration
	n, gaps := 0, 0
	for _, sp := range spans {
		recs, err := readTrial(expDir, sp.trial)
		if err != nil || len(recs) == 0 || recs[0].Time.Before(sp.start) {
			continue // a restarted attempt, or no report
		}
		startup += recs[0].Time.Sub(sp.start) - work
		ending += sp.end.Sub(recs[len(recs)-1].Time)
		n++
		for i := 1; i < len(recs); i++ {
			between += recs[i].Time.Sub(recs[i-1].Time) - work
			gaps++
		}
	}
	b := breakdown{inside: float64(placed-time.Duration(epochs)*work) / float64(slots) / ideal,
		pending: float64(pending) / float64(slots) / ideal, tail: float64(tail) / float64(slots) / ideal}
	if n > 0 {
		b.startup = startup / time.Duration(n)
		b.ending = ending / time.Duration(n)
	}
	if gaps > 0 {
		b.between = between / time.Duration(gaps)
	}
	return b
}

// report adds the breakdown's metrics (averaged over b.N by the caller's
// sums).
func (d *breakdown) add(o breakdown) {
	d.inside += o.inside
	d.pending += o.pending
	d.tail += o.tail
	d.startup += o.startup
	d.ending += o.ending
	d.between += o.between
}

func (d breakdown) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(d.inside/n, "inside/ideal")
	b.ReportMetric(d.pending/n, "idle-pending/ideal")
	b.ReportMetric(d.tail/n, "tail/ideal")
	b.ReportMetric(float64(d.startup)/n/1e6, "first-report-ms")
	b.ReportMetric(float64(d.ending)/n/1e6, "last-report-to-end-ms")
	b.ReportMetric(float64(d.between)/n/1e6, "report-gap-ms")
}
