package tune

import (
	"fmt"
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

// TPE draws a candidate near one good trial in all its top-level
// coordinates together: with the good trials at two opposite corners,
// near (0.2, 0.8) and (0.8, 0.2), and the rest on an even grid, candidates
// seldom land in the other two corners' quadrants, which sampling each
// dimension on its own (each coordinate's good values being 0.2 and 0.8
// alike) mixes in about half the time. The bad trials are 27, so that the
// default weights lower only the oldest, which is at the centre: each
// dimension's model stays symmetric about 0.5.
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
			observe("centre0", 0.5, 0.5, 1)
			for i := range 25 { // gamma(31) = 4: these are the rest
				observe(fmt.Sprint("grid", i), (float64(i%5)+0.5)/5, (float64(i/5)+0.5)/5, 1)
			}
			observe("centre1", 0.5, 0.5, 1)
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

// On seeds that B12 does not use (21-40), our TPE's median regret after
// 50 trials stays below bounds that the estimators it replaced missed
// (deterministic: no clock). Optuna 3.1's TPESampler has Branin 0.146 and
// Hartmann-6 0.659 on its own seeds 21-40. Before kernels were scored by
// shape, with Scott's-rule bandwidths in the joint model, ours had Branin
// 0.103 and Hartmann-6 0.548; univariate, Hartmann-6 0.824.
func TestTPEHeldOutSeeds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		obj         searchObjective
		independent bool
		max         float64
	}{
		{"branin", searchObjectives[0], false, 0.08},
		{"hartmann6", searchObjectives[1], false, 0.5},
		{"hartmann6 independent", searchObjectives[1], true, 0.75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var at50 []float64
			for seed := uint64(21); seed <= 40; seed++ {
				bests, err := bestAfter(TPESettings{Independent: tc.independent}, tc.obj, seed)
				must.NoError(t, err)
				at50 = append(at50, bests[1]-tc.obj.min)
			}
			must.Less(t, tc.max, median(at50), must.Sprintf("regrets %v", at50))
		})
	}
}

// TPE scores a kernel by its shape, as Optuna 3.1 does: the log density
// of an estimator fitted to six points of [0, 1] is what Optuna 3.1's
// _ParzenEstimator (univariate, default settings) gives at the same
// points; scored as a density (newParzen) it is up to 1.4 higher.
func TestTPEParzenScoresLikeOptuna31(t *testing.T) {
	obs := []float64{0.1, 0.15, 0.7, 0.72, 0.9, 0.33}
	p := newTPEParzen(modelOf(Uniform(0, 1)), obs, 1, defaultWeights(len(obs)))
	for i, tc := range []struct{ x, want float64 }{
		{0.01, -1.37467024}, {0.2, -1.16275044}, {0.5, -1.30796831}, {0.71, -1.13948988}, {0.99, -1.41114136},
	} {
		must.Eq(t, math.Round(tc.want*1e6), math.Round(p.logPDF(tc.x)*1e6), must.Sprintf("point %d, x = %v", i, tc.x))
	}
}
