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

// reports reads a run's latest report from its storage, a local
// directory or an object store, following it between reads.
type reports struct{ store *nomad.StoreProgress }

func newReports(storagePath, run string, opts ...storage.Option) *reports {
	return &reports{store: &nomad.StoreProgress{StoragePath: storagePath, Run: run, Options: opts}}
}

// Latest is the newest report; ok is false when there is none (yet).
func (r *reports) Latest(ctx context.Context) (storage.Record, bool) {
	rec, err := r.store.Latest(ctx)
	return rec, err == nil
}

func (r *reports) Close() { r.store.Close() }

// liveBar is a progress bar redrawn on a Live: fed reports and what the
// run waits for, it draws the Tracker's Progress at each tick.
type liveBar struct {
	live  *Live
	start time.Time

	mu      sync.Mutex
	t       Tracker // guarded by mu
	waiting string  // guarded by mu
}

// observe takes a report; one made before this launch (a resumed run)
// tells neither the rate nor that the workers are up.
func (b *liveBar) observe(r storage.Record) {
	if r.Time.Before(b.start) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.t.Observe(r)
}

// wait says what the run waits for until its first report.
func (b *liveBar) wait(what string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiting = what
}

// report and status are observe and wait, drawn at once: for a follower
// that is told of each change rather than polling.
func (b *liveBar) report(r storage.Record) { b.observe(r); b.draw() }
func (b *liveBar) status(what string)      { b.wait(what); b.draw() }

func (b *liveBar) draw() {
	b.mu.Lock()
	p := b.t.Progress(time.Since(b.start), b.waiting)
	b.mu.Unlock()
	w, _ := b.live.size()
	b.live.Set(p.Bar(w - 1))
}

// run draws the bar every tick, after poll (when set), until the returned
// stop is called; stop removes the bar.
func (b *liveBar) run(ctx context.Context, every time.Duration, poll func(context.Context)) (stop func()) {
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if poll != nil {
				poll(ctx)
			}
			b.draw()
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
		b.live.Finish(false)
	}
}

// showBar redraws a local run's progress bar on l.Live, reading its
// reports and launcher state, until the returned stop is called.
func showBar(ctx context.Context, l LocalRun, goal Goal, spec *trainspec.Spec, reports *reports, dir string, start time.Time) (stop func()) {
	b := &liveBar{live: l.Live, start: start, t: Tracker{Goal: goal, Score: spec.Run.Checkpoint.ScoreAttribute}}
	return b.run(ctx, l.BarEvery, func(ctx context.Context) {
		if rec, ok := reports.Latest(ctx); ok {
			b.observe(rec)
		}
		b.wait(waitingFor(dir, spec.Scaling.NumWorkers))
	})
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
