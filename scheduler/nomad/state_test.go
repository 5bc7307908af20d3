package nomad

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// stepWant is what the tracker must say after one recorded step.
type stepWant struct {
	phase    Phase
	decision Decision
	unplaced int
	failures int
	restarts int // restarts + reschedules over the gang
	lost     []int
}

func TestTrackerRecordings(t *testing.T) {
	cases := []struct {
		name  string
		count int
		wait  bool
		want  []stepWant
	}{
		{"gang-complete", 2, false, []stepWant{
			{phase: PhasePending},
			{phase: PhasePending},
			{phase: PhaseRunning},
			{phase: PhaseComplete, decision: Done},
		}},
		{"gang-blocked", 4, false, []stepWant{
			{phase: PhaseBlocked, decision: StopGang, unplaced: 2},
			{phase: PhaseBlocked, decision: StopGang, unplaced: 2},
			{phase: PhasePending},
			{phase: PhaseRunning},
		}},
		{"gang-blocked", 4, true, []stepWant{
			{phase: PhaseBlocked, unplaced: 2},
			{phase: PhaseBlocked, unplaced: 2},
			{phase: PhasePending},
			{phase: PhaseRunning},
		}},
		{"worker-rescheduled", 2, false, []stepWant{
			{phase: PhaseRunning},
			{phase: PhaseRunning, failures: 1, restarts: 1},
			{phase: PhasePending, failures: 2, restarts: 1},
			{phase: PhasePending, failures: 2, restarts: 2},
			{phase: PhaseRunning, failures: 2, restarts: 2},
			{phase: PhaseComplete, decision: Done, failures: 2, restarts: 2},
		}},
		{"reschedule-blocked", 2, false, []stepWant{
			{phase: PhaseRunning},
			{phase: PhaseBlocked, unplaced: 1, failures: 1},
			{phase: PhaseRunning, failures: 1, restarts: 1},
		}},
		{"worker-failed", 2, false, []stepWant{
			{phase: PhaseRunning},
			{phase: PhaseFailed, decision: Done, failures: 1, lost: []int{0}},
		}},
		{"node-lost", 2, false, []stepWant{
			{phase: PhaseRunning},
			{phase: PhasePending, failures: 1, restarts: 1},
			{phase: PhaseRunning, failures: 1, restarts: 1},
		}},
		{"job-stopped", 2, false, []stepWant{
			{phase: PhaseRunning},
			{phase: PhaseStopped, decision: Done},
		}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/wait=%v", tc.name, tc.wait), func(t *testing.T) {
			rec := loadRecording(t, tc.name)
			must.Eq(t, len(tc.want), len(rec.Steps))
			tr := NewTracker("worker", tc.count, tc.wait)
			for i, step := range rec.Steps {
				tr.Allocations(step.Allocations)
				tr.Evaluations(step.Evaluations)
				st := tr.Status()
				w := tc.want[i]
				must.Eq(t, w.phase, st.Phase, must.Sprintf("step %d", i))
				must.Eq(t, w.decision, st.Decision, must.Sprintf("step %d", i))
				must.Eq(t, w.unplaced, st.Unplaced, must.Sprintf("step %d", i))
				must.Eq(t, w.failures, len(st.Failures), must.Sprintf("step %d: %v", i, st.Failures))
				must.Eq(t, w.restarts, st.Restarts(), must.Sprintf("step %d", i))
				must.Eq(t, w.lost, st.Lost, must.Sprintf("step %d", i))
				for r, wk := range st.Workers {
					must.Eq(t, r, wk.Rank, must.Sprintf("step %d: workers are by rank", i))
				}
			}
		})
	}
}

func TestTrackerDetails(t *testing.T) {
	t.Run("blocked reason names the exhausted GPUs", func(t *testing.T) {
		st := statusAt(t, "gang-blocked", 4, 0)
		must.StrContains(t, st.Reason, `exhausted "devices: nvidia/gpu" on 2`)
		must.StrContains(t, st.Reason, "4 nodes evaluated")
	})
	t.Run("rescheduled rank keeps its rank on a new node", func(t *testing.T) {
		st := statusAt(t, "worker-rescheduled", 2, 4)
		must.Eq(t, "gpu-2", st.Workers[1].NodeName)
		must.Eq(t, 1, st.Workers[1].Reschedules)
		must.Eq(t, uint64(1), st.Workers[1].Restarts)
		must.Eq(t, 1, st.Failures[0].ExitCode)
		must.Eq(t, 1, st.Failures[0].Rank)
		must.StrContains(t, st.Workers[1].LastEvent, "Started")
	})
	t.Run("failed rank reports its exit code", func(t *testing.T) {
		st := statusAt(t, "worker-failed", 2, 1)
		must.Eq(t, 2, st.Failures[0].ExitCode)
		must.StrContains(t, st.Failures[0].String(), "rank 0")
	})
	t.Run("lost allocation is a failure of its rank", func(t *testing.T) {
		st := statusAt(t, "node-lost", 2, 1)
		must.Eq(t, 1, st.Failures[0].Rank)
		must.StrContains(t, st.Failures[0].Reason, "node is down")
	})
}

func TestTrackerBlockedEvalAlone(t *testing.T) {
	rec := loadRecording(t, "gang-blocked")
	step := rec.Steps[0]
	tr := NewTracker("worker", 4, false)
	tr.Allocations(step.Allocations)
	tr.Evaluations(step.Evaluations[1:]) // only the blocked evaluation
	st := tr.Status()
	must.Eq(t, PhaseBlocked, st.Phase)
	must.Eq(t, StopGang, st.Decision)
	must.Eq(t, 2, st.Unplaced)
	must.Eq(t, "waiting in a blocked evaluation", st.Reason)
}

func TestAllocRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		rank int
		ok   bool
	}{
		{"mnist.worker[0]", 0, true},
		{"a.b[c].worker[12]", 12, true},
		{"mnist.worker", 0, false},
		{"mnist.worker[-1]", 0, false},
		{"mnist.worker[x]", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := AllocRank(tc.name)
			must.Eq(t, tc.ok, ok)
			must.Eq(t, tc.rank, r)
		})
	}
}

// statusAt is the tracker's status after one step of a recording.
func statusAt(t *testing.T, name string, count, step int) Status {
	t.Helper()
	rec := loadRecording(t, name)
	tr := NewTracker("worker", count, false)
	tr.Allocations(rec.Steps[step].Allocations)
	tr.Evaluations(rec.Steps[step].Evaluations)
	return tr.Status()
}

// Edge cases written out by hand: each stub is one rank's only allocation.
func TestTrackerEdgeCases(t *testing.T) {
	stub := func(rank int, client, desired string) *api.AllocationListStub {
		return &api.AllocationListStub{ID: fmt.Sprintf("a%d", rank), Name: fmt.Sprintf("j.worker[%d]", rank),
			TaskGroup: "worker", ClientStatus: client, DesiredStatus: desired, CreateIndex: 10}
	}
	cases := []struct {
		name   string
		allocs []*api.AllocationListStub
		phase  Phase
	}{
		{"every node lost, replacements not yet placed", []*api.AllocationListStub{
			stub(0, "lost", "stop"), stub(1, "lost", "stop")}, PhasePending},
		{"rank 0 finished first", []*api.AllocationListStub{
			stub(0, "complete", "run"), stub(1, "running", "run")}, PhaseRunning},
		{"stopped while one was failing", []*api.AllocationListStub{
			stub(0, "complete", "stop"), stub(1, "failed", "stop")}, PhaseStopped},
		{"other groups ignored", []*api.AllocationListStub{
			stub(0, "running", "run"), stub(1, "running", "run"),
			{ID: "c", Name: "j.controller[0]", TaskGroup: "controller", ClientStatus: "failed", DesiredStatus: "run"}}, PhaseRunning},
		{"missing rank", []*api.AllocationListStub{stub(1, "running", "run")}, PhasePending},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker("worker", 2, false)
			tr.Allocations(tc.allocs)
			must.Eq(t, tc.phase, tr.Status().Phase)
		})
	}
}

// The allocation and evaluation streams each lag the other at times: rank
// 1's failure can show before the evaluation that reschedules it, or with
// that evaluation complete and not yet its outcome. Either looks final;
// a consistent read (Snapshot) tells a replacement on its way from a rank
// with none left.
func TestSnapshotTellsAFinalFailure(t *testing.T) {
	rec := loadRecording(t, "worker-rescheduled").Steps
	running := rec[1].Allocations
	registered := rec[1].Evaluations
	// Index 70: rank 1 fails; Nomad commits the rescheduling evaluation
	// with it. 75: that evaluation's plan gives the failed allocation its
	// follow-up; 76: the evaluation completes.
	failedAt := func(index uint64, followup string) []*api.AllocationListStub {
		a := *rec[2].Allocations[1]
		a.ModifyIndex, a.FollowupEvalID, a.NextAllocation = index, followup, ""
		return []*api.AllocationListStub{rec[2].Allocations[0], &a}
	}
	evalAt := func(status string, index uint64) []*api.Evaluation {
		e := &api.Evaluation{ID: "e-resched", TriggeredBy: "alloc-failure", Status: status, CreateIndex: 70, ModifyIndex: index}
		return append(slices.Clone(registered), e)
	}
	justFailed, followedUp := failedAt(70, ""), failedAt(75, "e-followup")
	pending, complete := evalAt("pending", 70), evalAt("complete", 76)

	streamed := func(allocs []*api.AllocationListStub, evals []*api.Evaluation) Status {
		tr := NewTracker("worker", 2, false)
		tr.Allocations(allocs)
		tr.Evaluations(evals)
		return tr.Status()
	}
	observed := func(s Snapshot) Status {
		tr := NewTracker("worker", 2, false)
		tr.Observe(s)
		return tr.Status()
	}
	// What the streams can show: the failure with the evaluations of before
	// it, or with its evaluation complete and the allocations of before.
	must.Eq(t, PhaseFailed, streamed(justFailed, registered).Phase)
	must.Eq(t, PhaseFailed, streamed(justFailed, complete).Phase)
	// Consistent reads at those moments.
	for name, s := range map[string]Snapshot{
		"failed after the first listing": {Before: running, Evaluations: registered, Allocations: justFailed},
		"rescheduling pending":           {Before: justFailed, Evaluations: pending, Allocations: justFailed},
		"rescheduled":                    {Before: justFailed, Evaluations: complete, Allocations: followedUp},
	} {
		must.NotEq(t, PhaseFailed, observed(s).Phase, must.Sprint(name))
	}
	// No evaluation came with the failure: no reschedule left.
	final := loadRecording(t, "worker-failed").Steps[1]
	st := observed(Snapshot{Before: final.Allocations, Evaluations: final.Evaluations, Allocations: final.Allocations})
	must.Eq(t, PhaseFailed, st.Phase)
	must.Eq(t, []int{0}, st.Lost)
}

// Workers that Nomad stops exit as stopped (code 6) after its Killing
// event: that is no failure. A failure before the stop still counts.
func TestStoppedWorkersAreNoFailures(t *testing.T) {
	step := loadRecording(t, "job-stopped").Steps[1]
	var allocs []*api.AllocationListStub
	for i, a := range step.Allocations {
		c := *a
		ts := *c.TaskStates["worker"]
		ts.Events = slices.Clone(ts.Events)
		for j, ev := range ts.Events {
			if ev.Type == api.TaskTerminated {
				e := *ev
				e.ExitCode = 6
				ts.Events[j] = &e
			}
		}
		if i == 1 { // this one had failed once and been restarted before
			failed := &api.TaskEvent{Type: api.TaskTerminated, ExitCode: 3, Time: ts.Events[2].Time + 1}
			restarting := &api.TaskEvent{Type: api.TaskRestarting, Time: ts.Events[2].Time + 2}
			started := &api.TaskEvent{Type: api.TaskStarted, Time: ts.Events[2].Time + 3}
			ts.Events = slices.Insert(ts.Events, 3, failed, restarting, started)
		}
		c.TaskStates = map[string]*api.TaskState{"worker": &ts}
		allocs = append(allocs, &c)
	}
	tr := NewTracker("worker", 2, false)
	tr.Allocations(allocs)
	st := tr.Status()
	must.Eq(t, PhaseStopped, st.Phase)
	must.SliceLen(t, 1, st.Failures)
	must.Eq(t, 1, st.Failures[0].Rank)
	must.Eq(t, 3, st.Failures[0].ExitCode)
}
