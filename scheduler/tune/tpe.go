package tune

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

func init() {
	registerSearcher("tpe", true, func() SearcherSettings { return &TPESettings{} })
}

// TPESettings is the Tree-structured Parzen Estimator searcher (Bergstra
// et al. 2011; Watanabe 2023), with Optuna's defaults. The finished trials
// are split into the gamma(n) = min(ceil(n/10), 25) best ("below") and the
// rest, a Parzen estimator is fitted to each, and of NEICandidates points
// drawn from the good one the one with the highest ratio of good to bad
// density wins (the highest expected improvement). Each numeric kernel's
// bandwidth is the distance to its farther neighbour, and kernels are
// scored by their shape, as Optuna 3.1 scores them (newTPEParzen). The
// space's top-level dimensions are modelled together (as Optuna's
// multivariate TPE: each component is one trial in all those dimensions),
// so a candidate keeps a good trial's coordinates together; dimensions
// inside choices, and every dimension with Independent, are sampled one
// at a time (Optuna's default). Until NStartupTrials trials
// have finished, values are drawn at random. Trials that the scheduler
// stopped early rank after the finished ones, by the time they reached
// and then their last value.
type TPESettings struct {
	// NStartupTrials is how many trials finish before the model is used
	// (default 10).
	NStartupTrials int `json:"n_startup_trials,omitempty"`
	// NEICandidates is how many candidates are scored for each value
	// (default 24).
	NEICandidates int `json:"n_ei_candidates,omitempty"`
	// PriorWeight is the weight of the prior, a wide component over the
	// whole range (default 1.0).
	PriorWeight float64 `json:"prior_weight,omitempty"`
	// MaxConcurrent bounds the trials this searcher has running at once
	// (0: max_concurrent_trials alone bounds them).
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// Independent samples every dimension on its own, as Optuna's
	// TPESampler does by default (multivariate=False).
	Independent bool `json:"independent,omitempty"`
}

// Kind is "tpe".
func (TPESettings) Kind() string { return "tpe" }

func (TPESettings) refusesGridSearch() {}

// validate reports every problem of the settings; given are the settings
// written (a 0 there is no default).
func (s TPESettings) validate(given givenKeys) error {
	var p problems
	p.nonNegative(namedInt{"n_startup_trials", s.NStartupTrials}, namedInt{"n_ei_candidates", s.NEICandidates},
		namedInt{"max_concurrent", s.MaxConcurrent})
	p.positive(given, namedFloat{"prior_weight", s.PriorWeight})
	return p.err()
}

func (s *TPESettings) defaults() {
	if s.NStartupTrials == 0 {
		s.NStartupTrials = 10
	}
	if s.NEICandidates == 0 {
		s.NEICandidates = 24
	}
	if s.PriorWeight == 0 {
		s.PriorWeight = 1
	}
}

// Build returns the searcher.
func (s TPESettings) Build(space map[string]any, o Objective, numSamples int, seed uint64) (Searcher, error) {
	if err := s.validate(nil); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("tpe: %w", err)
	}
	if err := refuseGrid(s.Kind(), space); err != nil {
		return nil, err
	}
	s.defaults()
	t := newModelSearch(space, o, numSamples, seed)
	t.sampler = func(name string, m dimModel) float64 { return t.tpeSample(s, name, m) }
	t.startup = s.NStartupTrials
	if !s.Independent {
		t.joint = func() map[string]float64 { return t.tpeJoint(s) }
	}
	return Limit(t, s.MaxConcurrent), nil
}

// modelSearch is what TPE and BOHB share: the space's dimensions, the
// trials with their params in model coordinates, and suggesting by
// sampling each dimension a trial reaches on its own.
type modelSearch struct {
	obj     Objective
	space   map[string]any
	sites   []site
	dims    map[string]dimModel
	total   int
	rng     *rand.Rand
	trials  []*searchTrial // in the order suggested
	byID    map[string]*searchTrial
	startup int // finished trials before the model is used
	// sampler draws a model coordinate for the named dimension.
	sampler func(name string, m dimModel) float64
	// joint, when set, draws the top-level dimensions together.
	joint func() map[string]float64
}

type searchTrial struct {
	number  int
	params  map[string]float64 // model coordinates by dimension name
	done    bool
	pruned  bool
	last    Result
	results map[float64]float64 // BOHB: value by time (budget)
}

func newModelSearch(space map[string]any, o Objective, total int, seed uint64) *modelSearch {
	t := &modelSearch{obj: o, space: space, sites: sites(space, nil, nil), dims: map[string]dimModel{},
		total: samplesTotal(total), rng: rand.New(rand.NewPCG(seed, 0x7470_6521)), byID: map[string]*searchTrial{}}
	for _, s := range t.sites {
		t.addDims(s.name(), s.dom)
	}
	return t
}

// samplesTotal is how many trials a model-based searcher makes for
// numSamples: maxVariants for UnlimitedSamples, at least 1.
func samplesTotal(numSamples int) int {
	if numSamples < 0 {
		return maxVariants
	}
	return max(numSamples, 1)
}

// addDims records d and, for a choice, the functions nested in its values.
func (t *modelSearch) addDims(name string, d Domain) {
	t.dims[name] = modelOf(d)
	opts, _ := options(d)
	for i, o := range opts {
		if inner, ok := o.(Domain); ok {
			t.addDims(fmt.Sprintf("%s/%d", name, i), inner)
			continue
		}
		for _, s := range sites(o, nil, nil) {
			t.addDims(fmt.Sprintf("%s/%d/%s", name, i, s.name()), s.dom)
		}
	}
}

func (t *modelSearch) Total() int { return t.total }

func (t *modelSearch) trial(id string) *searchTrial {
	tr := t.byID[id]
	if tr == nil {
		tr = &searchTrial{number: len(t.trials), params: map[string]float64{}, results: map[float64]float64{}}
		t.trials = append(t.trials, tr)
		t.byID[id] = tr
	}
	return tr
}

// finished is the trials a model learns from, in the order suggested.
func (t *modelSearch) finished() []*searchTrial {
	var out []*searchTrial
	for _, tr := range t.trials {
		if tr.done && !math.IsNaN(tr.last.Value) {
			out = append(out, tr)
		}
	}
	return out
}

// Suggest samples every dimension the new trial reaches: at random during
// start-up, from the model after.
func (t *modelSearch) Suggest(id string) (Variant, bool) {
	if len(t.trials) >= t.total {
		return Variant{}, false
	}
	tr := t.trial(id)
	random := len(t.finished()) < t.startup
	var joint map[string]float64
	if !random && t.joint != nil {
		joint = t.joint()
	}
	pick := func(name string, d Domain) any {
		m := t.dims[name]
		if x, ok := joint[name]; ok {
			v, x := m.external(x)
			tr.params[name] = x
			return v
		}
		if random {
			v := d.Sample(t.rng)
			if x, ok := m.internal(v); ok {
				tr.params[name] = x
			}
			return v
		}
		v, x := m.external(t.sampler(name, m))
		tr.params[name] = x
		return v
	}
	cfg := deepCopy(t.space).(map[string]any)
	params := map[string]any{}
	for _, s := range t.sites {
		setPath(cfg, s.path, pickNested(s.dom, s.name(), pick, params))
	}
	return Variant{Index: tr.number, Config: cfg, Params: params}, true
}

// Adopt records a restored trial's params.
func (t *modelSearch) Adopt(id string, params map[string]any) {
	tr := t.trial(id)
	for name, v := range params {
		if m, ok := t.dims[name]; ok {
			if x, ok := m.internal(v); ok {
				tr.params[name] = x
			}
		}
	}
}

// OnResult keeps the trial's latest result, and each budget's value.
func (t *modelSearch) OnResult(id string, r Result) {
	tr := t.trial(id)
	if !math.IsNaN(r.Value) {
		tr.last = r
		tr.results[r.Time] = r.Value
	}
}

// OnTrialComplete makes the trial one to learn from, unless it failed.
func (t *modelSearch) OnTrialComplete(id string, o Outcome) {
	tr := t.trial(id)
	if !o.learnable() {
		tr.last.Value = math.NaN()
		tr.done = true
		return
	}
	tr.done, tr.pruned, tr.last = true, o.Pruned, o.Last
}

// tpeGamma is Optuna's default: the best 10 %, at most 25.
func tpeGamma(n int) int { return min(int(math.Ceil(0.1*float64(n))), 25) }

// tpeSplit splits the finished trials into the gamma(n) best and the
// rest, as Optuna does: complete trials by value, then pruned ones by the
// time they reached (later first) and then their value; each part in the
// order suggested.
func (t *modelSearch) tpeSplit(trials []*searchTrial, nBelow int) (below, above []*searchTrial) {
	ranked := append([]*searchTrial(nil), trials...)
	sort.SliceStable(ranked, func(i, j int) bool {
		a, b := ranked[i], ranked[j]
		if a.pruned != b.pruned {
			return !a.pruned
		}
		if a.pruned && a.last.Time != b.last.Time {
			return a.last.Time > b.last.Time
		}
		return t.obj.better(a.last.Value, b.last.Value)
	})
	nBelow = min(nBelow, len(ranked))
	below, above = ranked[:nBelow:nBelow], ranked[nBelow:]
	byNumber := func(s []*searchTrial) {
		sort.Slice(s, func(i, j int) bool { return s[i].number < s[j].number })
	}
	byNumber(below)
	byNumber(above)
	return below, above
}

// observations are the model coordinates of dimension name in trials
// that have it.
func observations(trials []*searchTrial, name string) []float64 {
	var out []float64
	for _, tr := range trials {
		if x, ok := tr.params[name]; ok {
			out = append(out, x)
		}
	}
	return out
}

// tpeSample draws the value of one dimension by expected improvement.
func (t *modelSearch) tpeSample(s TPESettings, name string, m dimModel) float64 {
	trials := t.finished()
	below, above := t.tpeSplit(trials, tpeGamma(len(trials)))
	ob, oa := observations(below, name), observations(above, name)
	good := newTPEParzen(m, ob, s.PriorWeight, defaultWeights(len(ob)))
	bad := newTPEParzen(m, oa, s.PriorWeight, defaultWeights(len(oa)))
	return bestCandidate(t.rng, good, bad, s.NEICandidates)
}

// bestCandidate draws n candidates from good and returns the one with the
// highest log good/bad density ratio (the first, on a tie).
func bestCandidate(r *rand.Rand, good, bad *parzen, n int) float64 {
	best, bestScore := 0.0, math.Inf(-1)
	for i := range n {
		x := good.sample(r)
		if score := good.logPDF(x) - bad.logPDF(x); i == 0 || score > bestScore {
			best, bestScore = x, score
		}
	}
	return best
}
