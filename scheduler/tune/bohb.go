package tune

import (
	"fmt"
	"math"
	"sort"
)

func init() {
	registerSearcher("bohb", true, func() SearcherSettings { return &BOHBSettings{} })
}

// BOHBSettings is BOHB's model (Falkner et al. 2018), the searcher to pair
// with the hyperband scheduler: it learns from every intermediate result,
// by budget (the time attribute's value). For a new trial it takes the
// largest budget whose results split into at least MinPointsInModel good
// ones (the best TopNPercent) and as many bad ones (the next
// 100-TopNPercent), fits a product-kernel density (bohbKDE) to each, and
// of NumSamples candidates, drawn around the good configs with the
// bandwidth widened by BandwidthFactor, takes the one with the highest
// good/bad density ratio. The space's top-level dimensions are modelled
// together; those inside choices one at a time. A RandomFraction of the
// trials, and every trial until some budget has enough results, is drawn
// at random.
type BOHBSettings struct {
	// TopNPercent is the share of results at the budget that count as
	// good, in percent (default 15).
	TopNPercent float64 `json:"top_n_percent,omitempty"`
	// NumSamples is how many candidates are scored (default 64).
	NumSamples int `json:"num_samples,omitempty"`
	// RandomFraction of the trials is drawn at random (default 1/3; a
	// negative value is none).
	RandomFraction float64 `json:"random_fraction,omitempty"`
	// MinPointsInModel is the fewest good and the fewest bad results a
	// budget needs before it is modelled (default: the space's top-level
	// dimensions + 1).
	MinPointsInModel int `json:"min_points_in_model,omitempty"`
	// BandwidthFactor widens the good density's kernels for drawing
	// candidates (default 3).
	BandwidthFactor float64 `json:"bandwidth_factor,omitempty"`
	// MinBandwidth is the narrowest kernel, as a share of a dimension's
	// range (default 0.001).
	MinBandwidth float64 `json:"min_bandwidth,omitempty"`
	// MaxConcurrent bounds the trials this searcher has running at once.
	MaxConcurrent int `json:"max_concurrent,omitempty"`
}

// Kind is "bohb".
func (BOHBSettings) Kind() string { return "bohb" }

func (BOHBSettings) refusesGridSearch() {}

// validate reports every problem of the settings.
func (s BOHBSettings) validate(givenKeys) error {
	var p problems
	if s.TopNPercent < 0 || s.TopNPercent >= 100 {
		p.addf("top_n_percent", "must be between 0 and 100; got %v", s.TopNPercent)
	}
	if s.RandomFraction >= 1 {
		p.addf("random_fraction", "must be below 1; got %v", s.RandomFraction)
	}
	p.nonNegative(namedInt{"num_samples", s.NumSamples}, namedInt{"min_points_in_model", s.MinPointsInModel},
		namedInt{"max_concurrent", s.MaxConcurrent})
	if s.BandwidthFactor < 0 {
		p.addf("bandwidth_factor", "must not be negative; got %v", s.BandwidthFactor)
	}
	if s.MinBandwidth < 0 || s.MinBandwidth >= 1 {
		p.addf("min_bandwidth", "must be a share of the range, from 0 to below 1; got %v", s.MinBandwidth)
	}
	return p.err()
}

// Build returns the searcher.
func (s BOHBSettings) Build(space map[string]any, o Objective, numSamples int, seed uint64) (Searcher, error) {
	if err := s.validate(nil); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("bohb: %w", err)
	}
	if err := refuseGrid(s.Kind(), space); err != nil {
		return nil, err
	}
	if s.TopNPercent == 0 {
		s.TopNPercent = 15
	}
	if s.NumSamples == 0 {
		s.NumSamples = 64
	}
	switch {
	case s.RandomFraction == 0:
		s.RandomFraction = 1.0 / 3
	case s.RandomFraction < 0:
		s.RandomFraction = 0
	}
	if s.BandwidthFactor == 0 {
		s.BandwidthFactor = 3
	}
	if s.MinBandwidth == 0 {
		s.MinBandwidth = 1e-3
	}
	t := newModelSearch(space, o, numSamples, seed)
	if s.MinPointsInModel == 0 {
		s.MinPointsInModel = len(t.sites) + 1
	}
	b := &bohb{modelSearch: t, cfg: s}
	t.sampler = b.sample
	t.joint = b.joint
	return Limit(b, s.MaxConcurrent), nil
}

// bohb picks, for each suggestion, the budget to model and whether to go
// random, then samples each dimension from the budget's model.
type bohb struct {
	*modelSearch
	cfg       BOHBSettings
	good, bad []*searchTrial // the current suggestion's split (nil: random)
}

// Suggest chooses the model for this trial, then samples.
func (b *bohb) Suggest(id string) (Variant, bool) {
	b.good, b.bad = nil, nil
	b.startup = 0
	if b.rng.Float64() >= b.cfg.RandomFraction {
		b.split()
	}
	if b.good == nil {
		b.startup = math.MaxInt // random
	}
	return b.modelSearch.Suggest(id)
}

// split finds the largest budget whose results, of the trials that have
// every top-level dimension, give enough good and bad ones, and splits
// them: the best TopNPercent (at least MinPointsInModel) and the next
// 100-TopNPercent (as many at least), as BOHB's reference code does.
func (b *bohb) split() {
	counts := map[float64]int{}
	for _, tr := range b.trials {
		for budget, v := range tr.results {
			if !math.IsNaN(v) {
				counts[budget]++
			}
		}
	}
	budgets := make([]float64, 0, len(counts))
	for budget := range counts {
		budgets = append(budgets, budget)
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(budgets)))
	for _, budget := range budgets {
		if counts[budget] < 2*b.cfg.MinPointsInModel {
			continue
		}
		var at []*searchTrial
		for _, tr := range b.trials {
			if v, ok := tr.results[budget]; ok && !math.IsNaN(v) && b.hasTop(tr) {
				at = append(at, tr)
			}
		}
		sort.SliceStable(at, func(i, j int) bool { return b.obj.better(at[i].results[budget], at[j].results[budget]) })
		n := float64(len(at))
		nGood := max(b.cfg.MinPointsInModel, int(b.cfg.TopNPercent*n/100))
		nBad := max(b.cfg.MinPointsInModel, int((100-b.cfg.TopNPercent)*n/100))
		if len(at)-nGood < b.cfg.MinPointsInModel {
			continue
		}
		b.good, b.bad = at[:nGood], at[nGood:min(len(at), nGood+nBad)]
		return
	}
}

// hasTop reports whether the trial has every top-level dimension.
func (b *bohb) hasTop(tr *searchTrial) bool {
	for _, s := range b.sites {
		if _, ok := tr.params[s.name()]; !ok {
			return false
		}
	}
	return true
}

// joint draws the top-level dimensions together from the budget's
// densities.
func (b *bohb) joint() map[string]float64 {
	ms := make([]dimModel, len(b.sites))
	rows := func(trs []*searchTrial) [][]float64 {
		out := make([][]float64, len(trs))
		for i, tr := range trs {
			out[i] = make([]float64, len(b.sites))
			for d, s := range b.sites {
				out[i][d] = tr.params[s.name()]
			}
		}
		return out
	}
	for d, s := range b.sites {
		ms[d] = b.dims[s.name()]
	}
	good := newBOHBKDE(ms, rows(b.good), b.cfg.MinBandwidth)
	bad := newBOHBKDE(ms, rows(b.bad), b.cfg.MinBandwidth)
	var best []float64
	bestScore := math.Inf(-1)
	for i := range b.cfg.NumSamples {
		x := good.sample(b.rng, b.cfg.BandwidthFactor)
		if score := good.logPDF(x) - bad.logPDF(x); i == 0 || score > bestScore {
			best, bestScore = x, score
		}
	}
	out := make(map[string]float64, len(b.sites))
	for d, s := range b.sites {
		out[s.name()] = best[d]
	}
	return out
}

// sample draws one dimension from the chosen budget's models.
func (b *bohb) sample(name string, m dimModel) float64 {
	og, ob := observations(b.good, name), observations(b.bad, name)
	ones := func(n int) []float64 {
		w := make([]float64, n)
		for i := range w {
			w[i] = 1
		}
		return w
	}
	good := newParzen(m, og, 1, ones(len(og)))
	bad := newParzen(m, ob, 1, ones(len(ob)))
	return bestCandidate(b.rng, good, bad, b.cfg.NumSamples)
}
