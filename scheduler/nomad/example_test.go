package nomad_test

import (
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
)

// The tracker turns what Nomad reports into a decision: here two of four
// workers are placed and the rest wait in a blocked evaluation, so the gang
// is stopped rather than run half.
func ExampleTracker() {
	t := nomad.NewTracker("worker", 4, false)
	t.Allocations([]*api.AllocationListStub{
		{ID: "a0", Name: "mnist.worker[0]", TaskGroup: "worker", ClientStatus: "running", DesiredStatus: "run", CreateIndex: 31},
		{ID: "a1", Name: "mnist.worker[1]", TaskGroup: "worker", ClientStatus: "running", DesiredStatus: "run", CreateIndex: 31},
	})
	t.Evaluations([]*api.Evaluation{
		{ID: "e1", Status: "complete", BlockedEval: "e2", QueuedAllocations: map[string]int{"worker": 2},
			FailedTGAllocs: map[string]*api.AllocationMetric{"worker": {
				NodesEvaluated: 4, DimensionExhausted: map[string]int{"devices: nvidia/gpu": 2}}}},
		{ID: "e2", Status: "blocked", TriggeredBy: "queued-allocs"},
	})
	st := t.Status()
	fmt.Println(st.Phase, st.Decision, st.Unplaced)
	fmt.Println(st.Reason)
	// Output:
	// blocked stop-gang 2
	// 4 nodes evaluated; exhausted "devices: nvidia/gpu" on 2
}
