package tune

import (
	"math"
	"math/rand/v2"
)

// jointParzen models several dimensions at once: each component is one
// observation (or the prior) in every dimension, so that a candidate is
// drawn near one good trial in all its coordinates together rather than
// mixing coordinates of different trials (Optuna's multivariate TPE;
// Falkner et al. 2018).
type jointParzen struct {
	dims []*parzen // one per dimension, components in the same order
}

// newJointParzen fits the dimensions named in names to obs (per trial,
// oldest first, model coordinates by name), with Scott's rule for the
// bandwidth as Optuna's multivariate TPE sets it: 0.2 n^(-1/(d+4)) of each
// range, clipped as the one-dimensional estimator clips it.
func newJointParzen(ms []dimModel, obs [][]float64, priorWeight float64, weights []float64) *jointParzen {
	j := &jointParzen{}
	n := len(obs)
	bw := 0.2 * math.Pow(float64(max(n, 1)), -1/float64(len(ms)+4))
	for d, m := range ms {
		col := make([]float64, n)
		for i := range obs {
			col[i] = obs[i][d]
		}
		p := newParzen(m, col, priorWeight, weights)
		if p.cat == nil {
			span := m.hi - m.lo
			minSigma := span / math.Min(100, float64(n+2))
			for k := range n {
				p.sigmas[k] = math.Min(math.Max(bw*span, minSigma), span)
			}
		}
		j.dims = append(j.dims, p)
	}
	return j
}

// sample draws one point: a component by weight, then each coordinate
// from that component.
func (j *jointParzen) sample(r *rand.Rand) []float64 {
	k := j.dims[0].pick(r)
	x := make([]float64, len(j.dims))
	for d, p := range j.dims {
		x[d] = p.sampleFrom(r, k)
	}
	return x
}

// logPDF is the log density of the point x.
func (j *jointParzen) logPDF(x []float64) float64 {
	w := j.dims[0].weights
	terms := make([]float64, len(w))
	for k := range w {
		terms[k] = math.Log(w[k])
		for d, p := range j.dims {
			terms[k] += p.componentLogPDF(k, x[d])
		}
	}
	return logSumExp(terms)
}

// jointCandidate draws n points from good and returns the one with the
// highest log good/bad density ratio (the first, on a tie).
func jointCandidate(r *rand.Rand, good, bad *jointParzen, n int) []float64 {
	var best []float64
	bestScore := math.Inf(-1)
	for i := range n {
		x := good.sample(r)
		if score := good.logPDF(x) - bad.logPDF(x); i == 0 || score > bestScore {
			best, bestScore = x, score
		}
	}
	return best
}

// tpeJoint samples the dimensions that every new trial has (the space's
// top-level functions) together, from the trials that have all of them;
// the rest (inside choices) are sampled one by one.
func (t *modelSearch) tpeJoint(s TPESettings) map[string]float64 {
	var names []string
	var ms []dimModel
	for _, st := range t.sites {
		names = append(names, st.name())
		ms = append(ms, t.dims[st.name()])
	}
	if len(names) < 2 {
		return nil
	}
	trials := t.finished()
	below, above := t.tpeSplit(trials, tpeGamma(len(trials)))
	coords := func(trs []*searchTrial) [][]float64 {
		var out [][]float64
	next:
		for _, tr := range trs {
			row := make([]float64, len(names))
			for d, name := range names {
				x, ok := tr.params[name]
				if !ok {
					continue next
				}
				row[d] = x
			}
			out = append(out, row)
		}
		return out
	}
	ob, oa := coords(below), coords(above)
	good := newJointParzen(ms, ob, s.PriorWeight, defaultWeights(len(ob)))
	bad := newJointParzen(ms, oa, s.PriorWeight, defaultWeights(len(oa)))
	x := jointCandidate(t.rng, good, bad, s.NEICandidates)
	out := make(map[string]float64, len(names))
	for d, name := range names {
		out[name] = x[d]
	}
	return out
}
