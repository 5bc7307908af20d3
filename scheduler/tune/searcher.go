package tune

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Searcher suggests the configs of new trials and learns from their
// results (Ray's Searcher, Optuna's sampler). Like a Scheduler it is a pure
// state machine: the same calls in the same order give the same
// suggestions, so scripted transcripts pin it down. The tuner calls it from
// one goroutine: Suggest when a slot frees, OnResult for every report the
// scheduler let through, OnTrialComplete once a trial ends for good.
type Searcher interface {
	// Total is how many trials the searcher makes in all.
	Total() int
	// Suggest returns the config for the new trial; ok is false when it
	// has none to give now (its concurrency limit is reached, or all Total
	// were given).
	Suggest(trial string) (v Variant, ok bool)
	// Adopt tells the searcher of a trial it did not suggest in this
	// process (one restored from an earlier Fit), with its params.
	Adopt(trial string, params map[string]any)
	// OnResult takes one intermediate result of a running trial.
	OnResult(trial string, r Result)
	// OnTrialComplete says the trial ended; it reports no more.
	OnTrialComplete(trial string, o Outcome)
}

// Outcome is how a trial ended, as a searcher learns it.
type Outcome struct {
	// Last is the trial's last result (Value NaN when it never reported
	// the metric).
	Last Result
	// Pruned is true when the scheduler stopped the trial early; Failed
	// when it failed for good. A pruned trial still ranks by its last
	// result (Optuna ranks pruned trials after complete ones, by the step
	// they reached, then by value); a failed one is not learnt from.
	Pruned, Failed bool
}

// SearcherSettings is one kind of searcher with its settings, as a Go
// program or train.hcl's search_alg gives them. Each kind owns its settings
// type, their defaults and their validation.
type SearcherSettings interface {
	// Kind is the searcher's name, train.hcl's search_alg = "...".
	Kind() string
	// Build checks the settings and returns the searcher of space for
	// objective o, making numSamples trials (UnlimitedSamples: as many as
	// it can until the tuner's time budget ends); seed makes it
	// reproducible.
	Build(space map[string]any, o Objective, numSamples int, seed uint64) (Searcher, error)
}

type searcherKind struct {
	settings func() SearcherSettings
	ranks    bool // learns from the metric, so needs one
}

// searchers maps each kind's name to it; each searcher's file registers
// itself in an init function.
var searchers = map[string]searcherKind{}

func registerSearcher(name string, ranks bool, settings func() SearcherSettings) {
	if _, dup := searchers[name]; dup {
		panic("tune: searcher " + name + " registered twice")
	}
	searchers[name] = searcherKind{settings: settings, ranks: ranks}
}

// SearcherKinds lists the registered searcher names, sorted.
func SearcherKinds() []string {
	names := make([]string, 0, len(searchers))
	for n := range searchers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ParseSearcher decodes the settings of the searcher kind from a JSON
// object whose keys are the settings' names in train.hcl
// ("n_startup_trials"), and checks them against the objective's metric.
// Errors about one setting are *SettingError values naming it.
func ParseSearcher(kind string, settings []byte, metric string) (SearcherSettings, error) {
	k, ok := searchers[kind]
	if !ok {
		return nil, settingErrorf("type", "unknown searcher %q; the searchers are %s", kind, strings.Join(SearcherKinds(), ", "))
	}
	s := k.settings()
	var noMetric string
	if k.ranks && metric == "" {
		noMetric = fmt.Sprintf("the %s searcher learns from the results: set metric and mode in the tune block", kind)
	}
	if err := decodeSettings(kind, "searcher", s, settings, noMetric); err != nil {
		return nil, err
	}
	return s, nil
}

func init() {
	registerSearcher(SearchRandom, false, func() SearcherSettings { return &VariantSettings{kind: SearchRandom} })
	registerSearcher(SearchGrid, false, func() SearcherSettings { return &VariantSettings{kind: SearchGrid} })
}

// VariantSettings is the random or grid searcher: Ray's basic variant
// generator (Generator), which learns nothing from results and lists every
// trial up front (with UnlimitedSamples, as slots free). It has no settings.
type VariantSettings struct{ kind string }

// Kind is "random" or "grid".
func (s VariantSettings) Kind() string {
	if s.kind == "" {
		return SearchRandom
	}
	return s.kind
}

// Build returns the variant generator as a Searcher.
func (s VariantSettings) Build(space map[string]any, _ Objective, numSamples int, seed uint64) (Searcher, error) {
	g, err := NewGenerator(space, s.Kind(), numSamples, seed)
	if err != nil {
		return nil, err
	}
	return &variantSearcher{g: g, unlimited: numSamples < 0}, nil
}

// variantSearcher hands out the Generator's variants in order.
type variantSearcher struct {
	g         *Generator
	unlimited bool // UnlimitedSamples: made as slots free, not up front
}

func (v *variantSearcher) Total() int                     { return v.g.Total() }
func (v *variantSearcher) Suggest(string) (Variant, bool) { return v.g.Next() }

// Adopt skips the variant a restored trial was given: trials are made in
// the generator's order, so the next Suggest continues the sequence
// rather than repeat its start.
func (v *variantSearcher) Adopt(string, map[string]any)    { v.g.Next() }
func (v *variantSearcher) OnResult(string, Result)         {}
func (v *variantSearcher) OnTrialComplete(string, Outcome) {}

// eager says every trial is made up front (the variant generator learns
// nothing, so the experiment state lists them all from the start, as
// before searchers could learn); with UnlimitedSamples they are made as
// slots free, until the time budget ends.
func (v *variantSearcher) eager() bool { return !v.unlimited }

// eagerSearcher says whether s makes its trials up front.
func eagerSearcher(s Searcher) bool {
	if l, ok := s.(*limited); ok {
		s = l.Searcher
	}
	e, ok := s.(interface{ eager() bool })
	return ok && e.eager()
}

// learnable says a searcher can learn from the outcome.
func (o Outcome) learnable() bool {
	return !o.Failed && !math.IsNaN(o.Last.Value) && !math.IsInf(o.Last.Value, 0)
}

// Limit bounds the trials s has running at once to max (Ray's
// ConcurrencyLimiter): Suggest says "none now" until one completes. A max
// below 1 is no bound.
func Limit(s Searcher, max int) Searcher {
	return &limited{Searcher: s, max: max, live: map[string]bool{}}
}

type limited struct {
	Searcher
	max  int
	live map[string]bool // trials suggested and not yet complete
}

func (l *limited) Suggest(trial string) (Variant, bool) {
	if l.max > 0 && len(l.live) >= l.max {
		return Variant{}, false
	}
	v, ok := l.Searcher.Suggest(trial)
	if ok {
		l.live[trial] = true
	}
	return v, ok
}

func (l *limited) Adopt(trial string, params map[string]any) {
	l.live[trial] = true
	l.Searcher.Adopt(trial, params)
}

func (l *limited) OnTrialComplete(trial string, o Outcome) {
	delete(l.live, trial)
	l.Searcher.OnTrialComplete(trial, o)
}

// better says metric value a beats b.
func (o Objective) better(a, b float64) bool { return o.score(a) > o.score(b) }
