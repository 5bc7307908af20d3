package nomad

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/internal/english"
)

// Phase is where a run stands, as seen from its allocations and
// evaluations.
type Phase string

// Phases of a run.
const (
	// PhasePending: not every rank has a running worker yet, but nothing
	// says it cannot get one.
	PhasePending Phase = "pending"
	// PhaseBlocked: Nomad could not place every worker (a blocked
	// evaluation); the gang is incomplete until capacity frees up.
	PhaseBlocked Phase = "blocked"
	// PhaseRunning: every rank has a running worker.
	PhaseRunning Phase = "running"
	// PhaseComplete: every rank finished successfully.
	PhaseComplete Phase = "complete"
	// PhaseFailed: a rank failed and Nomad will not restart or reschedule
	// it, so the gang cannot go on.
	PhaseFailed Phase = "failed"
	// PhaseStopped: the job was stopped (nomad-train stop, nomad job stop).
	PhaseStopped Phase = "stopped"
)

// Decision is what the follower should do after an observation.
type Decision int

// Decisions.
const (
	// Wait for the next observation.
	Wait Decision = iota
	// Done: the run ended (complete, failed or stopped); report it.
	Done
	// StopGang: the gang cannot run whole (blocked without
	// WaitForCapacity); stop the job rather than run half of it.
	StopGang
)

func (d Decision) String() string {
	switch d {
	case Done:
		return "done"
	case StopGang:
		return "stop-gang"
	}
	return "wait"
}

// Worker is one rank of the gang: its current allocation and how often it
// was restarted (in place) or rescheduled (a new allocation).
type Worker struct {
	Rank          int
	AllocID       string
	NodeID        string
	NodeName      string
	ClientStatus  string
	DesiredStatus string
	// Restarts counts in-place task restarts over every allocation of the
	// rank; Reschedules counts replacement allocations.
	Restarts    uint64
	Reschedules int
	// LastEvent is the newest task event, as Nomad displays it.
	LastEvent string
}

// Failure is one worker failure: a task that exited non-zero, was killed
// by the driver, or an allocation that was lost with its node.
type Failure struct {
	Rank     int
	AllocID  string
	Time     time.Time
	ExitCode int
	Reason   string
}

func (f Failure) String() string {
	return fmt.Sprintf("rank %d (alloc %s): %s", f.Rank, shortID(f.AllocID), f.cause())
}

// Unranked is the failure as a job of one task (the tuner) shows it: its
// allocation and its cause.
func (f Failure) Unranked() string {
	return fmt.Sprintf("alloc %s: %s", shortID(f.AllocID), f.cause())
}

func (f Failure) cause() string {
	if f.ExitCode != 0 {
		return fmt.Sprintf("%s (exit code %d)", f.Reason, f.ExitCode)
	}
	return f.Reason
}

// Status is the run as the tracker sees it.
type Status struct {
	Phase    Phase
	Decision Decision
	// Workers has one entry per rank that has an allocation, by rank.
	Workers []Worker
	// Failures are every worker failure seen, oldest first.
	Failures []Failure
	// Unplaced is how many workers Nomad could not place, and Reason why
	// (from the evaluation's FailedTGAllocs), while Phase is blocked.
	Unplaced int
	Reason   string
	// Lost names the ranks Nomad gave up on (failed, with no restart or
	// reschedule left) when Phase is failed.
	Lost []int
}

// unsettled counts the workers whose current allocation may still change
// the outcome: pending or running, or failed without being in Lost (a
// replacement on its way, or a failure not yet confirmed) unless the job
// is being stopped.
func (s Status) unsettled() int {
	n := 0
	for _, w := range s.Workers {
		switch w.ClientStatus {
		case api.AllocClientStatusPending, api.AllocClientStatusRunning:
			n++
		case api.AllocClientStatusFailed:
			if w.DesiredStatus != api.AllocDesiredStatusStop && !slices.Contains(s.Lost, w.Rank) {
				n++
			}
		}
	}
	return n
}

// Restarts is the total number of restarts and reschedules of the gang.
func (s Status) Restarts() int {
	n := 0
	for _, w := range s.Workers {
		n += int(w.Restarts) + w.Reschedules
	}
	return n
}

// Tracker is the pure state machine that follows a run: it is fed the
// job's allocation and evaluation lists (as Nomad's blocking queries return
// them) and derives the run's Status and the follower's Decision. It does
// no I/O and is not safe for concurrent use.
type Tracker struct {
	group           string
	count           int
	waitForCapacity bool
	allocs          []*api.AllocationListStub
	evals           []*api.Evaluation
	// failedBefore holds the allocations already failed at the start of a
	// consistent read (Observe); nil when the lists were streamed apart.
	failedBefore map[string]bool
	// ranWhole: the whole gang has been seen running. A worker's
	// replacement that cannot be placed after that is waited for (the
	// workers' failure budget decides), never a reason to stop the run.
	ranWhole bool
	// since: allocations and evaluations created before it are an
	// earlier submission's (Since).
	since uint64
}

// Since makes the tracker ignore allocations and evaluations created
// before index, the Raft index the job was registered at: they belong to
// an earlier submission of the same job (its workers ran, and may have
// failed, before this run began).
func (t *Tracker) Since(index uint64) { t.since = index }

// current drops what an earlier submission left.
func current[T any](t *Tracker, items []T, created func(T) uint64) []T {
	if t.since == 0 {
		return items
	}
	var out []T
	for _, it := range items {
		if created(it) >= t.since {
			out = append(out, it)
		}
	}
	return out
}

func allocCreated(a *api.AllocationListStub) uint64 { return a.CreateIndex }
func evalCreated(e *api.Evaluation) uint64          { return e.CreateIndex }

// NewTracker follows group (count workers) of a job. Until the gang has run
// whole, a blocked evaluation means wait with waitForCapacity, and stop the
// gang without it; afterwards it always means wait.
func NewTracker(group string, count int, waitForCapacity bool) *Tracker {
	return &Tracker{group: group, count: count, waitForCapacity: waitForCapacity}
}

// Allocations replaces the tracker's view of the job's allocations.
func (t *Tracker) Allocations(allocs []*api.AllocationListStub) {
	t.allocs, t.failedBefore = current(t, allocs, allocCreated), nil
}

// Evaluations replaces the tracker's view of the job's evaluations.
func (t *Tracker) Evaluations(evals []*api.Evaluation) {
	t.evals, t.failedBefore = current(t, evals, evalCreated), nil
}

// Observe replaces both views with a consistent read (see Snapshot). Only
// such a read can tell that a failed worker will not be replaced: two
// lists streamed separately can show the failure and neither the
// evaluation that reschedules it nor that evaluation's outcome.
func (t *Tracker) Observe(s Snapshot) {
	t.allocs, t.evals = current(t, s.Allocations, allocCreated), current(t, s.Evaluations, evalCreated)
	t.failedBefore = map[string]bool{}
	for _, a := range current(t, s.Before, allocCreated) {
		if a.ClientStatus == api.AllocClientStatusFailed {
			t.failedBefore[a.ID] = true
		}
	}
}

// Snapshot is a consistent read of a job: its allocations, then its
// evaluations, then its allocations again. Nomad commits a failed
// allocation together with the evaluation that may reschedule it, and
// applies an evaluation's plan to the allocations before marking the
// evaluation complete. So for an allocation already failed in Before,
// Evaluations holds its evaluation, pending or complete, and Allocations
// the outcome of a complete one (a follow-up evaluation or a replacement).
type Snapshot struct {
	Before      []*api.AllocationListStub
	Evaluations []*api.Evaluation
	Allocations []*api.AllocationListStub
}

// ReadSnapshot reads a Snapshot of job jobID.
func ReadSnapshot(ctx context.Context, c API, jobID string) (Snapshot, error) {
	var s Snapshot
	var err error
	if s.Before, _, err = c.Allocations(ctx, jobID, 0); err != nil {
		return s, fmt.Errorf("listing allocations of %q: %w", jobID, err)
	}
	if s.Evaluations, _, err = c.Evaluations(ctx, jobID, 0); err != nil {
		return s, fmt.Errorf("listing evaluations of %q: %w", jobID, err)
	}
	if s.Allocations, _, err = c.Allocations(ctx, jobID, 0); err != nil {
		return s, fmt.Errorf("listing allocations of %q: %w", jobID, err)
	}
	return s, nil
}

// AllocRank is the rank of an allocation: the index in its name
// ("job.group[3]" is rank 3), which is also NOMAD_ALLOC_INDEX. Replacement
// allocations keep their predecessor's name and so its rank.
func AllocRank(name string) (int, bool) {
	i := strings.LastIndexByte(name, '[')
	if i < 0 || !strings.HasSuffix(name, "]") {
		return 0, false
	}
	n, err := strconv.Atoi(name[i+1 : len(name)-1])
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// Status derives the run's status from the latest observations. It also
// records that the gang has run whole, which later statuses depend on.
func (t *Tracker) Status() Status {
	byRank := map[int][]*api.AllocationListStub{}
	for _, a := range t.allocs {
		if a.TaskGroup != t.group {
			continue
		}
		r, ok := AllocRank(a.Name)
		if !ok {
			continue
		}
		byRank[r] = append(byRank[r], a)
	}
	var st Status
	ranks := make([]int, 0, len(byRank))
	for r := range byRank {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	var running, complete, stopped int
	live := 0 // ranks with a pending or running allocation
	for _, r := range ranks {
		chain := byRank[r]
		sort.Slice(chain, func(i, j int) bool { return chain[i].CreateIndex < chain[j].CreateIndex })
		cur := chain[len(chain)-1]
		w := Worker{
			Rank: r, AllocID: cur.ID, NodeID: cur.NodeID, NodeName: cur.NodeName,
			ClientStatus: cur.ClientStatus, DesiredStatus: cur.DesiredStatus,
			Reschedules: len(chain) - 1,
		}
		var last *api.TaskEvent
		for _, a := range chain {
			for _, ts := range sortedStates(a.TaskStates) {
				w.Restarts += ts.Restarts
				killing := false // Nomad is stopping the task: its exit is no failure
				for _, ev := range ts.Events {
					if last == nil || ev.Time >= last.Time {
						last = ev
					}
					switch ev.Type {
					case api.TaskKilling:
						killing = true
					case api.TaskRestarting, api.TaskStarted:
						killing = false
					}
					if f, ok := failureOf(r, a.ID, ev); ok && !(killing && ev.Type == api.TaskTerminated) {
						st.Failures = append(st.Failures, f)
					}
				}
			}
			if a.ClientStatus == api.AllocClientStatusLost {
				st.Failures = append(st.Failures, Failure{Rank: r, AllocID: a.ID, Time: time.Unix(0, a.ModifyTime).UTC(),
					Reason: "allocation lost: " + orDefault(a.ClientDescription, "node down")})
			}
		}
		if last != nil {
			w.LastEvent = last.Type + ": " + orDefault(last.DisplayMessage, last.Message)
		}
		st.Workers = append(st.Workers, w)

		switch {
		case cur.DesiredStatus == api.AllocDesiredStatusStop && cur.ClientStatus != api.AllocClientStatusLost:
			stopped++ // the job is being (or was) stopped
		case cur.ClientStatus == api.AllocClientStatusRunning:
			running++
			live++
		case cur.ClientStatus == api.AllocClientStatusComplete:
			complete++
		case cur.ClientStatus == api.AllocClientStatusPending:
			live++
		case cur.ClientStatus == api.AllocClientStatusFailed &&
			cur.NextAllocation == "" && cur.FollowupEvalID == "" && !t.replacementPending(cur) &&
			(t.failedBefore == nil || t.failedBefore[cur.ID]):
			// No reschedule left (after a consistent read: the failure
			// came before the evaluations were listed).
			st.Lost = append(st.Lost, r)
		default:
			// Failed with a reschedule on its way, or lost with its node
			// (Nomad replaces lost allocations whatever the reschedule
			// policy): not live, so a blocked replacement shows as blocked.
		}
	}
	sort.Slice(st.Failures, func(i, j int) bool { return st.Failures[i].Time.Before(st.Failures[j].Time) })

	st.Unplaced, st.Reason = t.blocked(live)
	switch {
	case len(st.Lost) > 0:
		st.Phase, st.Decision = PhaseFailed, Done
	case complete >= t.count:
		st.Phase, st.Decision = PhaseComplete, Done
	case stopped > 0 && stopped+complete == len(ranks):
		st.Phase, st.Decision = PhaseStopped, Done
	case st.Unplaced > 0 && live < t.count:
		st.Phase = PhaseBlocked
		if !t.waitForCapacity && !t.ranWhole {
			st.Decision = StopGang
		}
	case running > 0 && running+complete >= t.count:
		st.Phase = PhaseRunning // some ranks may finish before others
		t.ranWhole = true
	default:
		st.Phase = PhasePending
	}
	if st.Phase != PhaseBlocked {
		st.Unplaced, st.Reason = 0, ""
	}
	return st
}

// replacementPending reports whether an evaluation is still to place a
// replacement for a failed allocation (a reschedule with a delay, seen
// before the allocation records its follow-up evaluation).
func (t *Tracker) replacementPending(a *api.AllocationListStub) bool {
	for _, e := range t.evals {
		if e.TriggeredBy == "alloc-failure" && e.Status == "pending" && e.CreateIndex >= a.ModifyIndex {
			return true
		}
	}
	return false
}

// blocked returns how many workers wait in a blocked evaluation, and why
// they could not be placed. Nomad records the failure on the evaluation
// that spawned the blocked one (FailedTGAllocs, QueuedAllocations) and
// keeps the blocked one in status "blocked" until capacity appears.
func (t *Tracker) blocked(live int) (int, string) {
	open := map[string]bool{}
	for _, e := range t.evals {
		if e.Status == "blocked" {
			open[e.ID] = true
		}
	}
	if len(open) == 0 {
		return 0, ""
	}
	var best *api.Evaluation
	for _, e := range t.evals {
		if e.BlockedEval != "" && open[e.BlockedEval] && e.FailedTGAllocs[t.group] != nil {
			if best == nil || e.ModifyIndex > best.ModifyIndex {
				best = e
			}
		}
	}
	if best == nil {
		// The blocked evaluation without the one that spawned it (an
		// older list, or a garbage-collected parent): the shortfall is
		// what is not placed.
		return max(t.count-live, 0), "waiting in a blocked evaluation"
	}
	n := best.QueuedAllocations[t.group]
	m := best.FailedTGAllocs[t.group]
	if n == 0 {
		n = 1 + m.CoalescedFailures
	}
	return n, DescribeMetric(m)
}

// DescribeMetric says in one line why Nomad could not place an
// allocation.
func DescribeMetric(m *api.AllocationMetric) string {
	if m == nil {
		return ""
	}
	parts := []string{english.Count(m.NodesEvaluated, "node", "nodes") + " evaluated"}
	add := func(what string, counts map[string]int) {
		for _, k := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%s %q on %d", what, k, counts[k]))
		}
	}
	add("exhausted", m.DimensionExhausted)
	add("filtered by", m.ConstraintFiltered)
	add("class filtered", m.ClassFiltered)
	if m.NodesEvaluated == 0 && m.NodesInPool == 0 {
		parts = append(parts, "no nodes in the pool")
	}
	return strings.Join(parts, "; ")
}

// failureOf turns a task event into a failure when it is one.
func failureOf(rank int, allocID string, ev *api.TaskEvent) (Failure, bool) {
	f := Failure{Rank: rank, AllocID: allocID, Time: time.Unix(0, ev.Time).UTC(), ExitCode: ev.ExitCode}
	switch ev.Type {
	case api.TaskTerminated:
		if ev.ExitCode == 0 && ev.Signal == 0 {
			return f, false
		}
		f.Reason = "terminated"
		if ev.Signal != 0 {
			f.Reason += fmt.Sprintf(" by signal %d", ev.Signal)
		}
		if ev.Details["oom_killed"] == "true" {
			f.Reason += ", out of memory"
		}
	case api.TaskDriverFailure, api.TaskSetupFailure, api.TaskFailedValidation, api.TaskArtifactDownloadFailed:
		f.Reason = strings.ToLower(ev.Type) + ": " + orDefault(ev.DriverError, orDefault(ev.DisplayMessage, ev.Message))
	default:
		return f, false
	}
	return f, true
}

func sortedStates(m map[string]*api.TaskState) []*api.TaskState {
	out := make([]*api.TaskState, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
