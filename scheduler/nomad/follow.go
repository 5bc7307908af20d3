package nomad

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/trainspec"
)

// blockingWait is how long one blocking query may wait on the server.
const blockingWait = 5 * time.Minute

// Backoff after a failed query: doubling from min to max, with jitter.
const (
	backoffMin = 250 * time.Millisecond
	backoffMax = 10 * time.Second
)

// Errors callers test.
var (
	// ErrInsufficientCapacity: Nomad cannot place every worker of the gang.
	ErrInsufficientCapacity = errors.New("not enough capacity for the whole gang")
	// ErrRunFailed: a worker failed and Nomad will not restart it.
	ErrRunFailed = errors.New("run failed")
	// ErrRunStopped: the job was stopped before it finished.
	ErrRunStopped = errors.New("run stopped")
)

// FollowOptions configure Follow.
type FollowOptions struct {
	JobID string
	// Namespace is the job's namespace (for purging its secret).
	Namespace string
	// Group is the workers' task group (hcl.WorkerGroup when empty) and
	// Count its size.
	Group string
	Count int
	// WaitForCapacity keeps waiting while workers are blocked; otherwise a
	// blocked evaluation stops the job (Follow returns
	// ErrInsufficientCapacity).
	WaitForCapacity bool
	// OnStatus is called (from Follow's goroutine) whenever the status
	// changes.
	OnStatus func(Status)
	Logger   hclog.Logger
	// Jitter scales a backoff delay; nil picks uniformly in [d/2, d).
	Jitter func(time.Duration) time.Duration
	// Since is the Raft index the job was registered at (Submission.Index):
	// allocations and evaluations created before it are an earlier
	// submission's, not this run's. 0 follows them all.
	Since uint64
	// Settle is how long a failed or stopped run is followed further while
	// workers' allocations are still running or pending (the client marks a
	// task's allocation failed a few seconds after it gave up on it; stopped
	// workers checkpoint after the group's shutdown delay), so that the
	// result names every rank that failed and the last report is the
	// stop's checkpoint. Default 10 s.
	Settle time.Duration
}

// Follow watches a registered job with blocking queries on its
// allocations and evaluations until the run ends, and returns the final
// status. A failed run is ErrRunFailed, a stopped one ErrRunStopped; a gang
// that cannot be placed whole is stopped and purged (unless
// WaitForCapacity) and returned as ErrInsufficientCapacity. Cancelling ctx
// ends Follow with ctx's error and leaves the job running.
func Follow(ctx context.Context, c API, o FollowOptions) (Status, error) {
	if o.Group == "" {
		o.Group = trainspec.WorkerGroup
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Jitter == nil {
		o.Jitter = func(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
	}
	if o.Settle == 0 {
		o.Settle = 10 * time.Second
	}
	log := o.Logger.Named("follow").With("job", o.JobID)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	updates := make(chan update)
	errs := make(chan error, 2)
	go func() {
		errs <- watch(ctx, log.Named("allocs"), o.Jitter, forward(updates, "listing allocations",
			func(ctx context.Context, idx uint64) (update, uint64, error) {
				as, n, err := c.Allocations(ctx, o.JobID, idx)
				return update{allocs: as}, n, err
			}))
	}()
	go func() {
		errs <- watch(ctx, log.Named("evals"), o.Jitter, forward(updates, "listing evaluations",
			func(ctx context.Context, idx uint64) (update, uint64, error) {
				es, n, err := c.Evaluations(ctx, o.JobID, idx)
				return update{evals: es, isEval: true}, n, err
			}))
	}()

	t := NewTracker(o.Group, o.Count, o.WaitForCapacity)
	t.Since(o.Since)
	var last Status
	var haveAllocs, haveEvals, reported bool
	var settle <-chan time.Time // set once the run has failed or stopped
	settled := false
	for {
		select {
		case <-ctx.Done():
			// The watchers end on ctx; wait for both so none outlives us.
			cancel()
			<-errs
			<-errs
			return last, ctx.Err()
		case <-settle:
			settled = true
		case u := <-updates:
			if u.isEval {
				t.Evaluations(u.evals)
				haveEvals = true
			} else {
				t.Allocations(u.allocs)
				haveAllocs = true
			}
		}
		if !haveAllocs || !haveEvals {
			continue
		}
		st := t.Status()
		if !reported || !sameStatus(st, last) {
			reported = true
			log.Debug("status", "phase", st.Phase, "decision", st.Decision)
			if o.OnStatus != nil {
				o.OnStatus(st)
			}
		}
		last = st
		switch st.Decision {
		case Wait:
			continue
		case StopGang:
			if err := Stop(ctx, c, o.JobID, o.Namespace, true); err != nil {
				return st, fmt.Errorf("stopping half-placed gang: %w", err)
			}
			return st, fmt.Errorf("%w: %d of %s could not be placed (%s); job stopped, "+
				"use -wait-for-capacity to wait instead", ErrInsufficientCapacity, st.Unplaced, english.Count(o.Count, "worker", "workers"), st.Reason)
		}
		if st.Phase == PhaseFailed {
			// The two streams may each lag the other: confirm on one
			// consistent read that no replacement is on its way.
			snap, err := ReadSnapshot(ctx, c, o.JobID)
			if err != nil {
				return st, err
			}
			t.Observe(snap)
			if st = t.Status(); st.Phase != PhaseFailed {
				log.Debug("a failure looked final but a replacement is on its way", "phase", st.Phase)
				last = st
				continue
			}
		}
		if (st.Phase == PhaseFailed || st.Phase == PhaseStopped) && !settled && st.unsettled() > 0 {
			if settle == nil {
				timer := time.NewTimer(o.Settle)
				defer timer.Stop()
				settle = timer.C
			}
			last = st
			continue
		}
		switch st.Phase {
		case PhaseFailed:
			return st, fmt.Errorf("%w: ranks %v will not be restarted", ErrRunFailed, st.Lost)
		case PhaseStopped:
			return st, ErrRunStopped
		}
		return st, nil
	}
}

// update is one answer of a blocking query on the job's allocations or
// evaluations.
type update struct {
	allocs []*api.AllocationListStub
	evals  []*api.Evaluation
	isEval bool
}

// forward turns a list call into a watch query that hands each answer to
// the follower (or gives up when ctx ends).
func forward(updates chan<- update, what string,
	list func(ctx context.Context, idx uint64) (update, uint64, error)) func(context.Context, uint64) (uint64, error) {
	return func(ctx context.Context, idx uint64) (uint64, error) {
		u, n, err := list(ctx, idx)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", what, err)
		}
		select {
		case updates <- u:
		case <-ctx.Done():
		}
		return n, nil
	}
}

// watch runs one blocking-query loop: query(idx) blocks until the index
// moves past idx. Errors back off exponentially with jitter; a index that
// goes backwards (a server restore) starts over from 0.
func watch(ctx context.Context, log hclog.Logger, jitter func(time.Duration) time.Duration,
	query func(ctx context.Context, idx uint64) (uint64, error)) error {
	var idx uint64
	delay := backoffMin
	for ctx.Err() == nil {
		n, err := query(ctx, idx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			log.Warn("query failed; retrying", "error", err, "in", delay)
			if err := sleep(ctx, jitter(delay)); err != nil {
				return err
			}
			delay = min(2*delay, backoffMax)
			continue
		}
		delay = backoffMin
		switch {
		case n < idx:
			idx = 0
		case n == 0:
			idx = 1
		default:
			idx = n
		}
	}
	return ctx.Err()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// sameStatus reports whether two statuses would print the same.
func sameStatus(a, b Status) bool {
	if a.Phase != b.Phase || a.Decision != b.Decision || len(a.Workers) != len(b.Workers) ||
		len(a.Failures) != len(b.Failures) || a.Unplaced != b.Unplaced {
		return false
	}
	for i := range a.Workers {
		if a.Workers[i] != b.Workers[i] {
			return false
		}
	}
	return true
}
