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
// largest budget with at least d+2 results (d: the dimensions of the
// space), fits TPE-style Parzen estimators (each with a prior over the
// whole range) to the best TopNPercent of them (at least one; BOHB's
// multivariate KDE wants d+1, which with few results makes nearly all of
// them good) and to the rest, and of NumSamples candidates drawn from the
// good model takes the one with the highest good/bad density ratio,
// dimension by dimension. A RandomFraction of the trials, and every trial
// until some budget has enough results, is drawn at random.
type BOHBSettings struct {
	// TopNPercent is the share of results at the budget that count as
	// good, in percent (default 15).
	TopNPercent float64 `json:"top_n_percent,omitempty"`
	// NumSamples is how many candidates are scored (default 64).
	NumSamples int `json:"num_samples,omitempty"`
	// RandomFraction of the trials is drawn at random (default 1/3; a
	// negative value is none).
	RandomFraction float64 `json:"random_fraction,omitempty"`
	// MinPointsInModel is the results a budget needs before it is
	// modelled (default: the space's dimensions + 2).
	MinPointsInModel int `json:"min_points_in_model,omitempty"`
	// MaxConcurrent bounds the trials this searcher has running at once.
	MaxConcurrent int `json:"max_concurrent,omitempty"`
}

// Kind is "bohb".
func (BOHBSettings) Kind() string { return "bohb" }

func (s BOHBSettings) validate() error {
	if s.TopNPercent < 0 || s.TopNPercent >= 100 {
		return settingErrorf("top_n_percent", "must be between 0 and 100; got %v", s.TopNPercent)
	}
	if s.RandomFraction >= 1 {
		return settingErrorf("random_fraction", "must be below 1; got %v", s.RandomFraction)
	}
	for _, v := range []struct {
		name string
		val  int
	}{{"num_samples", s.NumSamples}, {"min_points_in_model", s.MinPointsInModel}, {"max_concurrent", s.MaxConcurrent}} {
		if v.val < 0 {
			return settingErrorf(v.name, "must not be negative; got %d", v.val)
		}
	}
	return nil
}

// Build returns the searcher.
func (s BOHBSettings) Build(space map[string]any, o Objective, numSamples int, seed uint64) (Searcher, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("bohb: %w", err)
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
	t := newModelSearch(space, o, numSamples, seed)
	if s.MinPointsInModel == 0 {
		s.MinPointsInModel = len(t.sites) + 2
	}
	b := &bohb{modelSearch: t, cfg: s}
	t.sampler = b.sample
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

// split finds the largest budget with enough results and splits its
// trials into the best TopNPercent (at least d+1) and the worst rest.
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
	for budget, n := range counts {
		if n >= b.cfg.MinPointsInModel {
			budgets = append(budgets, budget)
		}
	}
	if len(budgets) == 0 {
		return
	}
	sort.Float64s(budgets)
	budget := budgets[len(budgets)-1]
	var at []*searchTrial
	for _, tr := range b.trials {
		if _, ok := tr.results[budget]; ok {
			at = append(at, tr)
		}
	}
	sort.SliceStable(at, func(i, j int) bool { return b.obj.better(at[i].results[budget], at[j].results[budget]) })
	// TPE-style: the good ones and the rest, each with a prior over the
	// whole range, rather than BOHB's d+1 points at least in each (which
	// with a few dimensions and few results makes nearly all of them good).
	n := len(at)
	nGood := max(1, int(math.Ceil(b.cfg.TopNPercent*float64(n)/100)))
	b.good, b.bad = at[:nGood], at[nGood:]
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
