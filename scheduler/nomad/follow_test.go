package nomad

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
)

// TestFollowRecordings replays each recording through the fake agent over
// real HTTP: Follow's blocking queries walk the recording step by step.
func TestFollowRecordings(t *testing.T) {
	cases := []struct {
		name   string
		count  int
		wait   bool
		phase  Phase
		err    error
		phases []Phase // the distinct phases reported, in order
	}{
		{"gang-complete", 2, false, PhaseComplete, nil, []Phase{PhasePending, PhaseRunning, PhaseComplete}},
		{"gang-blocked", 4, false, PhaseBlocked, ErrInsufficientCapacity, []Phase{PhaseBlocked}},
		{"worker-rescheduled", 2, false, PhaseComplete, nil,
			[]Phase{PhaseRunning, PhasePending, PhaseRunning, PhaseComplete}},
		{"reschedule-blocked", 2, false, PhaseRunning, context.DeadlineExceeded,
			[]Phase{PhaseRunning, PhaseBlocked, PhaseRunning}},
		{"worker-failed", 2, false, PhaseFailed, ErrRunFailed, []Phase{PhaseRunning, PhaseFailed}},
		{"job-stopped", 2, false, PhaseStopped, ErrRunStopped, []Phase{PhaseRunning, PhaseStopped}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, c := newTestClient(t)
			srv.AddJob(testJob("mnist", tc.count))
			srv.Script("mnist", loadRecording(t, tc.name).Steps)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var phases []Phase
			st, err := Follow(ctx, c, FollowOptions{
				JobID: "mnist", Count: tc.count, WaitForCapacity: tc.wait, Settle: 100 * time.Millisecond,
				OnStatus: func(s Status) {
					if len(phases) == 0 || phases[len(phases)-1] != s.Phase {
						phases = append(phases, s.Phase)
					}
				},
			})
			must.Eq(t, tc.phase, st.Phase)
			if tc.err == nil {
				must.NoError(t, err)
			} else {
				must.ErrorIs(t, err, tc.err)
			}
			must.True(t, phasesMatch(phases, tc.phases), must.Sprintf("phases %v, want %v", phases, tc.phases))
		})
	}
}

// phasesMatch reports whether got is want with, at most, extra pending
// phases: a follower may see the allocation list of one moment with the
// evaluation list of the moment before (two blocking queries), which can
// read as pending in between.
func phasesMatch(got, want []Phase) bool {
	i := 0
	for _, p := range got {
		switch {
		case i < len(want) && p == want[i]:
			i++
		case p != PhasePending:
			return false
		}
	}
	return i == len(want)
}

func TestPhasesMatch(t *testing.T) {
	r, p, b := PhaseRunning, PhasePending, PhaseBlocked
	must.True(t, phasesMatch([]Phase{r, p, b, p, r}, []Phase{r, b, r}))
	must.False(t, phasesMatch([]Phase{r, r}, []Phase{r, b, r}))
	must.False(t, phasesMatch([]Phase{r, PhaseFailed, r}, []Phase{r, r}))
}

func TestFollowBlockedGangIsStoppedNotRunHalf(t *testing.T) {
	srv, c := newTestClient(t)
	_, err := Submit(context.Background(), c, testJob("mnist", 4), SubmitOptions{})
	must.NoError(t, err)
	srv.Script("mnist", loadRecording(t, "gang-blocked").Steps)
	_, err = Follow(testCtx(t), c, FollowOptions{JobID: "mnist", Count: 4})
	must.ErrorIs(t, err, ErrInsufficientCapacity)
	must.StrContains(t, err.Error(), "2 of 4 workers could not be placed")
	stopped, purged := srv.Stopped("mnist")
	must.True(t, stopped)
	must.True(t, purged)
	must.Nil(t, srv.Variable("nomad/jobs/mnist"))
}

func TestFollowWaitsForCapacity(t *testing.T) {
	srv, c := newTestClient(t)
	srv.AddJob(testJob("mnist", 4))
	srv.Script("mnist", loadRecording(t, "gang-blocked").Steps)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var phases []Phase
	st, err := Follow(ctx, c, FollowOptions{JobID: "mnist", Count: 4, WaitForCapacity: true,
		OnStatus: func(s Status) {
			if len(phases) == 0 || phases[len(phases)-1] != s.Phase {
				phases = append(phases, s.Phase)
			}
			if s.Phase == PhaseRunning {
				cancel() // the recording ends with the gang running
			}
		}})
	must.ErrorIs(t, err, context.Canceled)
	must.Eq(t, PhaseRunning, st.Phase)
	must.Eq(t, []Phase{PhaseBlocked, PhasePending, PhaseRunning}, phases)
	stopped, _ := srv.Stopped("mnist")
	must.False(t, stopped)
}

// flakyAPI fails its first list calls, then serves one fixed step.
type flakyAPI struct {
	API
	mu    sync.Mutex
	fails [2]int // allocations, evaluations
	step  struct {
		allocs []*api.AllocationListStub
		evals  []*api.Evaluation
	}
}

func (f *flakyAPI) fail(list int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails[list] > 0 {
		f.fails[list]--
		return errors.New("connection refused")
	}
	return nil
}

func (f *flakyAPI) Allocations(ctx context.Context, _ string, _ uint64) ([]*api.AllocationListStub, uint64, error) {
	if err := f.fail(0); err != nil {
		return nil, 0, err
	}
	return f.step.allocs, 5, nil
}

func (f *flakyAPI) Evaluations(ctx context.Context, _ string, _ uint64) ([]*api.Evaluation, uint64, error) {
	if err := f.fail(1); err != nil {
		return nil, 0, err
	}
	return f.step.evals, 5, nil
}

func (f *flakyAPI) Logs(context.Context, *api.Allocation, string, string, bool) (io.ReadCloser, error) {
	return nil, errors.New("unused")
}

func TestFollowBacksOffOnErrors(t *testing.T) {
	rec := loadRecording(t, "gang-complete")
	f := &flakyAPI{fails: [2]int{2, 3}}
	last := rec.Steps[len(rec.Steps)-1]
	f.step.allocs, f.step.evals = last.Allocations, last.Evaluations
	var mu sync.Mutex
	var delays []time.Duration
	st, err := Follow(testCtx(t), f, FollowOptions{JobID: "mnist", Count: 2,
		Jitter: func(d time.Duration) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			delays = append(delays, d)
			return time.Millisecond
		}})
	must.NoError(t, err)
	must.Eq(t, PhaseComplete, st.Phase)
	// Each watcher backs off on its own, doubling from backoffMin.
	slices.Sort(delays)
	must.Eq(t, []time.Duration{backoffMin, backoffMin, 2 * backoffMin, 2 * backoffMin, 4 * backoffMin}, delays)
}

func TestWatchBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var delays []time.Duration
	var indexes []uint64
	answers := []struct {
		idx uint64
		err error
	}{
		{0, errors.New("a")}, {0, errors.New("b")}, {0, errors.New("c")},
		{7, nil}, {0, errors.New("d")}, {9, nil}, {3, nil}, {0, nil},
	}
	i := 0
	err := watch(ctx, nullLogger(), func(d time.Duration) time.Duration { delays = append(delays, d); return 0 },
		func(ctx context.Context, idx uint64) (uint64, error) {
			indexes = append(indexes, idx)
			if i == len(answers) {
				cancel()
				return 0, ctx.Err()
			}
			a := answers[i]
			i++
			return a.idx, a.err
		})
	must.ErrorIs(t, err, context.Canceled)
	must.Eq(t, []time.Duration{backoffMin, 2 * backoffMin, 4 * backoffMin, backoffMin}, delays)
	// After an error the index is kept; an index going backwards resets
	// to 0; a zero index becomes 1.
	must.Eq(t, []uint64{0, 0, 0, 0, 7, 7, 9, 0, 1}, indexes)
}

// A failed run is followed a little further while other workers are still
// running, so the result names every rank that failed: here rank 1's
// allocation is marked failed one step after rank 0's.
func TestFollowNamesEveryFailedRank(t *testing.T) {
	steps := loadRecording(t, "worker-failed").Steps
	last := steps[len(steps)-1]
	r1 := *last.Allocations[1]
	must.Eq(t, "running", r1.ClientStatus)
	r1.ClientStatus, r1.ModifyIndex = "failed", r1.ModifyIndex+40
	steps = append(steps, nomadtest.Step{
		Allocations: []*api.AllocationListStub{last.Allocations[0], &r1},
		Evaluations: last.Evaluations,
	})
	st, err := followSteps(t, steps)
	must.ErrorIs(t, err, ErrRunFailed)
	must.Eq(t, []int{0, 1}, st.Lost)
	must.ErrorContains(t, err, "ranks [0 1] will not be restarted")
}

// A stopped run is followed until its workers have exited (they checkpoint
// first), not only until Nomad marked them to stop.
func TestFollowStopWaitsForWorkersToExit(t *testing.T) {
	steps := loadRecording(t, "job-stopped").Steps
	var stopping []*api.AllocationListStub
	for _, a := range steps[0].Allocations {
		c := *a
		c.DesiredStatus = api.AllocDesiredStatusStop
		stopping = append(stopping, &c)
	}
	steps = slices.Insert(steps, 1, nomadtest.Step{Allocations: stopping, Evaluations: steps[1].Evaluations})
	st, err := followSteps(t, steps)
	must.ErrorIs(t, err, ErrRunStopped)
	for _, w := range st.Workers {
		must.Eq(t, api.AllocClientStatusComplete, w.ClientStatus)
	}
}

// followSteps follows a 2-worker job through steps on the fake agent, with
// a settle time the steps never need to run out.
func followSteps(t *testing.T, steps []nomadtest.Step) (Status, error) {
	return followStepsSince(t, steps, 0)
}

func followStepsSince(t *testing.T, steps []nomadtest.Step, since uint64) (Status, error) {
	t.Helper()
	srv, c := newTestClient(t)
	srv.AddJob(testJob("mnist", 2))
	srv.Script("mnist", steps)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return Follow(ctx, c, FollowOptions{JobID: "mnist", Count: 2, Settle: 3 * time.Second, Since: since})
}

// A job submitted again still lists what its earlier submission ran: a
// completed (or failed) gang. Follow, told where this submission begins,
// follows only the new allocations, so the earlier gang's end is not this
// run's.
func TestFollowIgnoresAnEarlierSubmission(t *testing.T) {
	earlier := nomadtest.Allocations("mnist", 2, 5, api.AllocClientStatusFailed, api.AllocDesiredStatusRun)
	with := func(next nomadtest.Step) nomadtest.Step {
		next.Allocations = append(slices.Clone(earlier.Allocations), next.Allocations...)
		return next
	}
	steps := []nomadtest.Step{
		with(nomadtest.Step{Evaluations: []*api.Evaluation{}}), // registered, nothing placed yet
		with(nomadtest.Allocations("mnist", 2, 20, api.AllocClientStatusPending, api.AllocDesiredStatusRun)),
		with(nomadtest.Allocations("mnist", 2, 20, api.AllocClientStatusRunning, api.AllocDesiredStatusRun)),
		with(nomadtest.Allocations("mnist", 2, 20, api.AllocClientStatusComplete, api.AllocDesiredStatusRun)),
	}
	st, err := followStepsSince(t, steps, 18)
	must.NoError(t, err)
	must.Eq(t, PhaseComplete, st.Phase)
	must.Eq(t, 0, st.Restarts())
	must.SliceEmpty(t, st.Failures)

	// An earlier gang that completed is not this run completing: the first
	// status is pending, and the end comes with the new gang's.
	done := nomadtest.Allocations("mnist", 2, 5, api.AllocClientStatusComplete, api.AllocDesiredStatusRun)
	srv, c := newTestClient(t)
	srv.AddJob(testJob("mnist", 2))
	var after []nomadtest.Step
	for _, st := range steps {
		st.Allocations = append(slices.Clone(done.Allocations), st.Allocations[2:]...)
		after = append(after, st)
	}
	srv.Script("mnist", after)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var phases []Phase
	st, err = Follow(ctx, c, FollowOptions{JobID: "mnist", Count: 2, Since: 18,
		OnStatus: func(s Status) { phases = append(phases, s.Phase) }})
	must.NoError(t, err)
	must.Eq(t, PhaseComplete, st.Phase)
	must.Eq(t, PhasePending, phases[0])
}
