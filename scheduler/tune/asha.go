package tune

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
)

func init() {
	registerScheduler("asha", true, func() SchedulerSettings { return &ASHASettings{} })
}

// ASHASettings are asynchronous successive halving's settings (train.hcl's
// scheduler { type = "asha" }); zero values are the defaults.
type ASHASettings struct {
	// MaxT is the time at which every trial stops (default 100).
	MaxT float64 `json:"max_t,omitempty"`
	// GracePeriod is the first rung: no trial stops before it (default 1).
	GracePeriod float64 `json:"grace_period,omitempty"`
	// ReductionFactor is η: each rung keeps the top 1/η (default 4).
	ReductionFactor float64 `json:"reduction_factor,omitempty"`
	// Brackets is the number of brackets, each starting one rung later
	// (default 1, at most 16).
	Brackets int `json:"brackets,omitempty"`
}

// Kind is "asha".
func (ASHASettings) Kind() string { return "asha" }

// Build returns an ASHA scheduler for o.
func (s ASHASettings) Build(o Objective, seed uint64) (Scheduler, error) {
	return NewASHA(ASHAConfig{Objective: o, ASHASettings: s, Seed: seed})
}

// validate reports every problem of the settings; given are the settings
// written (a 0 there is no default).
func (s ASHASettings) validate(given givenKeys) error {
	var p problems
	p.positive(given, namedFloat{"max_t", s.MaxT}, namedFloat{"grace_period", s.GracePeriod},
		namedFloat{"reduction_factor", s.ReductionFactor})
	if s.ReductionFactor > 0 && s.ReductionFactor <= 1 {
		p.addf("reduction_factor", "must exceed 1; got %v", s.ReductionFactor)
	}
	if maxT, grace := cmp.Or(s.MaxT, 100), cmp.Or(s.GracePeriod, 1); maxT > 0 && grace > maxT {
		p.addf("grace_period", "must be at most max_t (%v); got %v", maxT, grace)
	}
	if s.Brackets < 0 || s.Brackets > 16 || s.Brackets == 0 && given["brackets"] {
		p.addf("brackets", "must be between 1 and 16; got %d", s.Brackets)
	}
	return p.err()
}

// ASHAConfig configures asynchronous successive halving.
type ASHAConfig struct {
	Objective
	ASHASettings
	// Seed draws each trial's bracket.
	Seed uint64
}

// ASHA is asynchronous successive halving (Ray's AsyncHyperBandScheduler).
// Each bracket has rungs at grace·η^k; when a trial first reaches a rung it
// is stopped if its score is below the (1-1/η) quantile of the scores
// recorded at that rung so far, and its score is recorded there.
type ASHA struct {
	cfg      ASHAConfig
	brackets []*ashaBracket
	trials   map[string]int // trial -> bracket
	rng      *rand.Rand
}

type ashaRung struct {
	milestone float64
	recorded  map[string]float64
}

type ashaBracket struct {
	rf    float64
	rungs []ashaRung // highest milestone first
}

// NewASHA returns an ASHA scheduler.
func NewASHA(cfg ASHAConfig) (*ASHA, error) {
	if err := cfg.Objective.validate(); err != nil {
		return nil, fmt.Errorf("asha: %w", err)
	}
	if cfg.MaxT == 0 {
		cfg.MaxT = 100
	}
	if cfg.GracePeriod == 0 {
		cfg.GracePeriod = 1
	}
	if cfg.ReductionFactor == 0 {
		cfg.ReductionFactor = 4
	}
	if cfg.Brackets == 0 {
		cfg.Brackets = 1
	}
	switch {
	case cfg.GracePeriod <= 0 || cfg.MaxT < cfg.GracePeriod:
		return nil, fmt.Errorf("asha: need 0 < grace_period <= max_t, got %v and %v", cfg.GracePeriod, cfg.MaxT)
	case cfg.ReductionFactor <= 1:
		return nil, fmt.Errorf("asha: reduction_factor must exceed 1, got %v", cfg.ReductionFactor)
	case cfg.Brackets < 1:
		return nil, fmt.Errorf("asha: brackets must be at least 1, got %d", cfg.Brackets)
	}
	a := &ASHA{cfg: cfg, trials: map[string]int{}, rng: rand.New(rand.NewPCG(cfg.Seed, 0xa5_4a))}
	// The small epsilon keeps log(27)/log(3) from rounding down to 2.
	maxRungs := int(math.Log(cfg.MaxT/cfg.GracePeriod)/math.Log(cfg.ReductionFactor) + 1 + 1e-9)
	for s := 0; s < cfg.Brackets; s++ {
		b := &ashaBracket{rf: cfg.ReductionFactor}
		for k := maxRungs - s - 1; k >= 0; k-- {
			b.rungs = append(b.rungs, ashaRung{
				milestone: cfg.GracePeriod * math.Pow(cfg.ReductionFactor, float64(k+s)),
				recorded:  map[string]float64{},
			})
		}
		a.brackets = append(a.brackets, b)
	}
	return a, nil
}

// OnTrialAdd draws the trial's bracket, weighting brackets with more rungs
// exponentially higher (as Ray does).
func (a *ASHA) OnTrialAdd(trial string, _ map[string]any) {
	if _, ok := a.trials[trial]; ok {
		return
	}
	maxSize := 0
	for _, b := range a.brackets {
		maxSize = max(maxSize, len(b.rungs))
	}
	weights := make([]float64, len(a.brackets))
	sum := 0.0
	for i, b := range a.brackets {
		weights[i] = math.Exp(float64(len(b.rungs) - maxSize))
		sum += weights[i]
	}
	x := a.rng.Float64() * sum
	idx := len(a.brackets) - 1
	for i, w := range weights {
		if x < w {
			idx = i
			break
		}
		x -= w
	}
	a.trials[trial] = idx
}

// OnResult applies the rungs of the trial's bracket.
func (a *ASHA) OnResult(r Result) Decision {
	if _, ok := a.trials[r.Trial]; !ok {
		a.OnTrialAdd(r.Trial, nil)
	}
	b := a.brackets[a.trials[r.Trial]]
	d := b.onResult(r.Trial, r.Time, a.cfg.score(r.Value), a.cfg.Objective)
	if r.Time >= a.cfg.MaxT {
		return Decision{Action: Stop, Reason: fmt.Sprintf("reached max_t %v", a.cfg.MaxT), Finished: true}
	}
	return d
}

// OnTrialComplete does nothing: recorded scores stay in their rungs.
func (a *ASHA) OnTrialComplete(string) {}

func (b *ashaBracket) onResult(trial string, t, score float64, o Objective) Decision {
	for _, rung := range b.rungs {
		_, seen := rung.recorded[trial]
		if t >= rung.milestone && seen {
			break // the decision at this rung is already made
		}
		if t < rung.milestone || seen {
			continue
		}
		vals := make([]float64, 0, len(rung.recorded))
		for _, v := range rung.recorded {
			vals = append(vals, v)
		}
		cutoff, ok := percentile(vals, (1-1/b.rf)*100)
		if !math.IsNaN(score) {
			rung.recorded[trial] = score
		}
		if ok && (score < cutoff || math.IsNaN(score)) { // a missing or NaN metric is the worst
			return Decision{Action: Stop, Reason: fmt.Sprintf("rung %v: %s %.6g worse than cutoff %.6g of %d", rung.milestone, o.Metric, o.score(score), o.score(cutoff), len(vals))}
		}
		if ok {
			return Decision{Action: Continue, Reason: fmt.Sprintf("rung %v: %s %.6g passes cutoff %.6g of %d", rung.milestone, o.Metric, o.score(score), o.score(cutoff), len(vals))}
		}
		return Decision{Action: Continue, Reason: fmt.Sprintf("rung %v: first %s %.6g", rung.milestone, o.Metric, o.score(score))}
	}
	return Decision{Action: Continue}
}
