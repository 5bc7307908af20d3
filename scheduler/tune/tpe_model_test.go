package tune

import (
	"fmt"
	"testing"

	"github.com/shoenig/test/must"
)

// TPE draws a candidate near one good trial in all its top-level
// coordinates together: with the good trials at two opposite corners,
// near (0.2, 0.8) and (0.8, 0.2), and the rest on an even grid, candidates
// seldom land in the other two corners' quadrants, which sampling each
// dimension on its own (each coordinate's good values being 0.2 and 0.8
// alike) mixes in about half the time.
func TestTPEJointKeepsCoordinatesTogether(t *testing.T) {
	space := map[string]any{"x": Uniform(0, 1), "y": Uniform(0, 1)}
	good := [][2]float64{{0.2, 0.8}, {0.25, 0.75}, {0.8, 0.2}, {0.75, 0.25}}
	for _, tc := range []struct {
		name        string
		independent bool
		lo, hi      int // suggestions of 40 in the mixed quadrants
	}{
		{"joint", false, 0, 4},
		{"independent", true, 12, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srch, err := TPESettings{Independent: tc.independent}.Build(space, Objective{Metric: "loss", Mode: ModeMin}, 100, 3)
			must.NoError(t, err)
			observe := func(id string, x, y, v float64) {
				srch.Adopt(id, map[string]any{"x": x, "y": y})
				srch.OnTrialComplete(id, Outcome{Last: Result{Trial: id, Time: 1, Value: v}})
			}
			for i, p := range good {
				observe(fmt.Sprint("good", i), p[0], p[1], 0)
			}
			for i := range 36 { // gamma(40) = 4: these are the rest
				observe(fmt.Sprint("grid", i), (float64(i%6)+0.5)/6, (float64(i/6)+0.5)/6, 1)
			}
			mixed := 0
			for i := range 40 {
				v, ok := srch.Suggest(fmt.Sprint("new", i))
				must.True(t, ok)
				if x, y := numParam(v.Params, "x"), numParam(v.Params, "y"); (x < 0.5) == (y < 0.5) {
					mixed++
				}
			}
			must.Between(t, tc.lo, mixed, tc.hi)
		})
	}
}

// On Hartmann-6 our TPE's median regret after 50 trials, over 20 seeds
// that B12 does not use (21-40), is at most 0.7: Optuna 3.1's TPESampler
// has 0.59 on B12's seeds; sampling each dimension on its own had 0.82
// (deterministic: no clock).
func TestTPEHartmann6(t *testing.T) {
	o := searchObjectives[1]
	var at50 []float64
	for seed := uint64(21); seed <= 40; seed++ {
		bests, err := bestAfter(TPESettings{}, o, seed)
		must.NoError(t, err)
		at50 = append(at50, bests[1]-o.min)
	}
	must.Less(t, 0.7, median(at50), must.Sprintf("regrets %v", at50))
}
