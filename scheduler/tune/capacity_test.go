package tune

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/trainspec"
)

// queueBackend is a backend whose trials first wait for capacity: each
// says so, tells the test, and is placed when the test lets it.
type queueBackend struct {
	waited chan string   // a trial's ID once it said it waits
	placed chan struct{} // a send places the waiting trial, the next ends it
	mu     sync.Mutex
	runs   map[string]int // guarded by mu
}

func (b *queueBackend) Run(ctx context.Context, t TrialSpec) error {
	b.mu.Lock()
	b.runs[t.ID]++
	b.mu.Unlock()
	t.Waiting(ctx, "waiting for capacity: node full")
	b.waited <- t.ID
	select {
	case <-b.placed:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.Waiting(ctx, "")
	select {
	case <-b.placed: // the test saw it running
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// awaitState waits until the saved state shows trial id with status and
// reason.
func awaitState(t *testing.T, dir, id, status, reason string) {
	t.Helper()
	var last *TrialState
	for range 2000 {
		st, ok, err := LoadState(context.Background(), dir)
		must.NoError(t, err)
		if ok {
			for _, ts := range st.Trials {
				if ts.ID == id {
					last = ts
					if ts.Status == status && ts.Reason == reason {
						return
					}
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never became %s %q (last %+v)", id, status, reason, last)
}

// A trial whose backend waits for capacity is PENDING, with the reason, in
// the saved state (what the table and status show) and holds its slot:
// the tuner neither starts it a second time nor starts another trial in
// its slot; once placed it is RUNNING, and it ends TERMINATED.
func TestTrialWaitingForCapacityIsPending(t *testing.T) {
	b := &queueBackend{waited: make(chan string, 8), placed: make(chan struct{}), runs: map[string]int{}}
	// A free slot beside the waiting trial: it must not be given to the
	// same trial again.
	cfg := Config{Name: "q", StoragePath: t.TempDir(), NumSamples: 1, MaxConcurrentTrials: 2, PollInterval: time.Millisecond}
	dir := cfg.StoragePath + "/q"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type fit struct {
		g   *ResultGrid
		err error
	}
	done := make(chan fit, 1)
	go func() {
		g, err := New(b, map[string]any{"x": Uniform(0, 1)}, cfg).Fit(ctx)
		done <- fit{g, err}
	}()
	id := "trial_0000"
	must.EqOp(t, id, <-b.waited)
	awaitState(t, dir, id, StatusPending, "waiting for capacity: node full")
	b.placed <- struct{}{}
	awaitState(t, dir, id, StatusRunning, "")
	b.placed <- struct{}{}
	r := <-done
	must.NoError(t, r.err)
	for _, tr := range r.g.Trials {
		must.EqOp(t, StatusTerminated, tr.Status)
		must.EqOp(t, "", tr.Reason)
	}
	must.Eq(t, map[string]int{"trial_0000": 1}, b.runs)
}

// On a fake cluster with room for one trial at a time and two concurrent
// trials, every trial runs to its end and none is in ERROR: the second
// trial waits (PENDING) while the first holds the node, and is placed when
// it ends (the 7 of 8 trials in ERROR within 4 s).
func TestNomadJobsWaitForCapacity(t *testing.T) {
	fc, c, spec, space := onFakeNomad(t, synthTrain)
	fc.srv.SetNodes(nomadtest.ClientNode("client", 1, 2048)) // one worker of 1 core
	var mu sync.Mutex
	waited := map[string]bool{}
	b := &NomadJobs{API: c, Spec: spec, StopTimeout: 10 * time.Second, PlanInterval: 5 * time.Millisecond,
		OnStatus: func(trial string, st nomad.Status) {}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tb := &watchWaits{Backend: b, mu: &mu, waited: waited}
	g, err := New(tb, space, Config{Name: spec.Name, StoragePath: spec.Run.StoragePath,
		NumSamples: 8, MaxConcurrentTrials: 2, Metric: "loss", Mode: ModeMin, Seed: 5,
		PollInterval: 10 * time.Millisecond}).Fit(ctx)
	must.NoError(t, err)
	must.Len(t, 8, g.Trials)
	for _, tr := range g.Trials {
		must.EqOp(t, StatusTerminated, tr.Status, must.Sprintf("%s: %s", tr.ID, tr.Reason))
		must.EqOp(t, 8, tr.Iterations)
	}
	must.EqOp(t, 8, fc.count("PUT /v1/jobs"), must.Sprint("each trial registered once"))
	for _, tr := range g.Trials {
		must.NotNil(t, fc.srv.Job(trainspec.TrialJobID("nt", tr.ID)))
	}
	mu.Lock()
	defer mu.Unlock()
	must.MapNotEmpty(t, waited, must.Sprint("no trial ever waited: the node had room for two"))
}

// watchWaits records which trials said they waited for capacity.
type watchWaits struct {
	Backend
	mu     *sync.Mutex
	waited map[string]bool
}

func (w *watchWaits) Run(ctx context.Context, t TrialSpec) error {
	inner := t.Waiting
	t.Waiting = func(ctx context.Context, why string) {
		if why != "" {
			w.mu.Lock()
			w.waited[t.ID] = true
			w.mu.Unlock()
		}
		inner(ctx, why)
	}
	return w.Backend.Run(ctx, t)
}

// A trial whose gang no node could hold even when idle fails at once,
// with the reason, and is not retried: waiting or retrying cannot help.
func TestNomadJobsUnplaceableTrial(t *testing.T) {
	fc, c, spec, _ := onFakeNomad(t, synthTrain)
	fc.srv.SetNodes(nomadtest.ClientNode("client", 4, 512)) // a worker asks 1024 MB
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := New(&NomadJobs{API: c, Spec: spec, PlanInterval: time.Millisecond}, map[string]any{"lr": 0.1, "epochs": 3},
		Config{Name: spec.Name, StoragePath: spec.Run.StoragePath, MaxFailures: 3}).Fit(ctx)
	must.NoError(t, err)
	must.EqOp(t, StatusError, g.Trials[0].Status)
	must.StrContains(t, g.Trials[0].Reason, "could hold only 0 with nothing else running")
	must.EqOp(t, 1, fc.count("PUT /v1/job/nt-trial_0000/plan"), must.Sprint("no retry"))
	must.EqOp(t, 0, fc.count("PUT /v1/jobs"))
}
