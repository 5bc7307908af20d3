package tune

import (
	"fmt"
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

// BOHB models a budget once its results give d+1 good ones (the best 15
// %, at least d+1) and d+1 bad ones (the next 85 %, at least d+1), as its
// KDE needs more points than dimensions; with two dimensions, five results
// are too few.
func TestBOHBSplit(t *testing.T) {
	for _, tc := range []struct {
		results         int
		nGood, nBad     int
		modelledAtAbove bool
	}{
		{5, 0, 0, false},
		{6, 3, 3, false},
		{40, 6, 34, false},
		{40, 6, 34, true}, // a larger budget with too few results is passed over
	} {
		t.Run(fmt.Sprint(tc.results, tc.modelledAtAbove), func(t *testing.T) {
			s, err := BOHBSettings{RandomFraction: -1}.Build(map[string]any{"x": Uniform(0, 1), "y": Uniform(0, 1)},
				Objective{Metric: "loss", Mode: ModeMin}, 100, 1)
			must.NoError(t, err)
			b := s.(*limited).Searcher.(*bohb)
			for i := range tc.results {
				id := fmt.Sprint("t", i)
				b.Adopt(id, map[string]any{"x": float64(i) / 40, "y": 0.5})
				b.OnResult(id, Result{Trial: id, Time: 1, Value: float64(i)})
				if tc.modelledAtAbove && i < 5 {
					b.OnResult(id, Result{Trial: id, Time: 3, Value: float64(i)})
				}
			}
			b.split()
			must.Eq(t, tc.nGood, len(b.good))
			must.Eq(t, tc.nBad, len(b.bad))
			for i, tr := range b.good {
				must.Eq(t, float64(i), tr.results[1]) // the best first
			}
		})
	}
}

// The KDE's bandwidth is the normal reference rule, 1.06 σ n^(-1/(d+4)),
// at least the minimum share of the range; a choice's is its kernel's λ,
// at most (c-1)/c.
func TestBOHBKDEBandwidth(t *testing.T) {
	ms := []dimModel{modelOf(Uniform(0, 10)), modelOf(Choice("a", "b", "c")), modelOf(Uniform(0, 1))}
	data := [][]float64{{2, 0, 0.5}, {4, 1, 0.5}, {6, 2, 0.5}}
	k := newBOHBKDE(ms, data, 1e-3)
	scale := math.Pow(3, -1.0/7)
	must.InDelta(t, 1.06*math.Sqrt(8.0/3)*scale, k.bw[0], 1e-12)
	must.InDelta(t, 2.0/3, k.bw[1], 1e-12) // 1.06 σ n^(-1/7) = 0.74, above (c-1)/c
	must.InDelta(t, 1e-3, k.bw[2], 1e-12)  // no spread: the minimum
	// the choice kernel: the observed option 1-λ, each other λ/2
	must.InDelta(t, math.Log(1.0/3), k.kernel(1, 0, 0, 1), 1e-12)
	must.InDelta(t, math.Log(1.0/3), k.kernel(1, 0, 2, 1), 1e-12)
}

// At equal total epochs (1200), BOHB with HyperBand beats ASHA with random
// search on B12's budgeted objective: the median regret over 10 seeds
// that B12 does not use (11-20). Deterministic: no clock.
func TestBOHBBeatsASHARandom(t *testing.T) {
	const maxT = 27
	hb := HyperBandSettings{MaxT: maxT, ReductionFactor: 3}
	asha := ASHASettings{MaxT: maxT, GracePeriod: 1, ReductionFactor: 3}
	regret := func(s SearcherSettings, sc SchedulerSettings) float64 {
		var xs []float64
		for seed := uint64(11); seed <= 20; seed++ {
			v, err := simulate(s, sc, 1200, maxT, seed)
			must.NoError(t, err)
			xs = append(xs, v-searchObjectives[1].min)
		}
		return median(xs)
	}
	bohb, random := regret(BOHBSettings{}, hb), regret(VariantSettings{}, asha)
	must.Less(t, random, bohb, must.Sprintf("bohb %v asha-random %v", bohb, random))
}
