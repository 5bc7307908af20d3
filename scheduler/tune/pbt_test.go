package tune

import (
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

// A trial in the bottom quantile clones a top trial's latest checkpoint,
// but not the same one twice: while the donor has not moved on (it waits
// for room on a cluster, say) the trial goes on, and it clones again once
// the donor has a newer checkpoint.
func TestPBTClonesACheckpointOnce(t *testing.T) {
	p, err := NewPBT(PBTConfig{Objective: Objective{Metric: "loss", Mode: ModeMin},
		PBTSettings: PBTSettings{PerturbationInterval: 2, QuantileFraction: 0.34,
			HyperparamMutations: map[string]any{"lr": []any{0.1, 0.2}}}, Seed: 1})
	must.NoError(t, err)
	for _, id := range []string{"good", "mid", "bad"} {
		p.OnTrialAdd(id, map[string]any{"lr": 0.1})
	}
	report := func(id string, time, loss float64) Decision {
		return p.OnResult(Result{Trial: id, Time: time, Value: loss, Checkpoint: true})
	}
	report("good", 1, math.NaN())
	report("mid", 1, 0.5)
	report("good", 2, 0.1)
	d := report("bad", 2, 9)
	must.EqOp(t, Exploit, d.Action, must.Sprint(d.Reason))
	must.EqOp(t, "good", d.Donor)

	// The trial resumes from good's step 2; good has not moved on.
	report("bad", 3, 8)
	d = report("bad", 4, 7)
	must.EqOp(t, Continue, d.Action)
	must.StrContains(t, d.Reason, "no donor has a checkpoint it has not cloned")

	report("good", 3, 0.09)
	report("good", 4, 0.08)
	d = report("bad", 6, 6)
	must.EqOp(t, Exploit, d.Action, must.Sprint(d.Reason))
	must.EqOp(t, "good", d.Donor)
}
