package console

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// reports reads a run's latest report from its storage: a local
// directory, or an object store (kept open between reads).
type reports struct {
	dir   string               // a local run directory, or ""
	store *nomad.StoreProgress // an object store, or nil
}

func newReports(storagePath, run string) *reports {
	if storage.IsObjectPath(storagePath) {
		return &reports{store: &nomad.StoreProgress{StoragePath: storagePath, Run: run}}
	}
	return &reports{dir: launch.RunDir(storagePath, run)}
}

// Latest is the newest report; ok is false when there is none (yet).
func (r *reports) Latest(ctx context.Context) (storage.Record, bool) {
	if r.store != nil {
		rec, err := r.store.Latest(ctx)
		return rec, err == nil
	}
	if r.dir == "" {
		return storage.Record{}, false
	}
	return LastRecord(r.dir)
}

func (r *reports) Close() {
	if r.store != nil {
		r.store.Close()
	}
}

// showBar redraws the run's progress bar on l.Live until the returned
// stop is called; stop removes the bar.
func showBar(ctx context.Context, l LocalRun, goal Goal, spec *trainspec.Spec, reports *reports, dir string, start time.Time) (stop func()) {
	every := l.BarEvery
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	t := &Tracker{Goal: goal, Score: spec.Run.Checkpoint.ScoreAttribute}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			// A report from before this launch (a resumed run) tells
			// neither the rate nor that the workers are up.
			if rec, ok := reports.Latest(ctx); ok && !rec.Time.Before(start) {
				t.Observe(rec)
			}
			w, _ := l.Live.size()
			l.Live.Set(t.Progress(time.Since(start), waitingFor(dir, spec.Scaling.NumWorkers)).Bar(w - 1))
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		l.Live.Finish(false)
	}
}

// waitingFor says what a local run waits for before its first report:
// its workers' start, then their rendezvous and first step.
func waitingFor(dir string, n int) string {
	st, err := launch.ReadState(dir)
	if err != nil {
		return "waiting for the first report"
	}
	running := 0
	for _, w := range st.Workers {
		if w.Running {
			running++
		}
	}
	if running < n {
		return fmt.Sprintf("starting workers: %d of %d running", running, n)
	}
	return fmt.Sprintf("waiting for %s to rendezvous and report", workers(n))
}
