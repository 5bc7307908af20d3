package tune

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
)

func init() {
	registerScheduler("pbt", true, func() SchedulerSettings { return &PBTSettings{} })
}

// PBTSettings are population based training's settings (train.hcl's
// scheduler { type = "pbt" }); zero values are the defaults.
type PBTSettings struct {
	// PerturbationInterval is how much time passes between two exploit
	// decisions of a trial (default 1).
	PerturbationInterval float64 `json:"perturbation_interval,omitempty"`
	// BurnInPeriod: no exploit before this time.
	BurnInPeriod float64 `json:"burn_in_period,omitempty"`
	// HyperparamMutations names the config entries to explore, by path
	// ("lr", "optim/momentum"), each with a Domain to resample from or a
	// list of values ([]any) to step through. In JSON the Domains take
	// their ParseSpace form ({"loguniform": [0.0001, 0.1]}).
	HyperparamMutations map[string]any `json:"hyperparam_mutations,omitempty"`
	// QuantileFraction is the share of trials in the top and bottom
	// quantiles (default 0.25).
	QuantileFraction float64 `json:"quantile_fraction,omitempty"`
	// ResampleProbability is the chance of resampling a value instead of
	// perturbing it (default 0.25).
	ResampleProbability float64 `json:"resample_probability,omitempty"`
	// PerturbationFactors multiply continuous values (default 1.2, 0.8).
	PerturbationFactors []float64 `json:"perturbation_factors,omitempty"`
}

// Kind is "pbt".
func (PBTSettings) Kind() string { return "pbt" }

// Build returns a PBT scheduler for o.
func (s PBTSettings) Build(o Objective, seed uint64) (Scheduler, error) {
	return NewPBT(PBTConfig{Objective: o, PBTSettings: s, Seed: seed})
}

// UnmarshalJSON decodes the settings, reading hyperparam_mutations'
// search-space functions as Domains.
func (s *PBTSettings) UnmarshalJSON(data []byte) error {
	type plain PBTSettings
	var p plain
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	if len(p.HyperparamMutations) > 0 {
		raw, err := json.Marshal(p.HyperparamMutations)
		if err != nil {
			return err
		}
		if p.HyperparamMutations, err = ParseSpace(raw); err != nil {
			return settingErrorf("hyperparam_mutations", "%v", err)
		}
	}
	*s = PBTSettings(p)
	return nil
}

// validate reports every problem of the settings; given are the settings
// written (a 0 there is no default; burn_in_period = 0 is Ray's default).
func (s PBTSettings) validate(given givenKeys) error {
	var p problems
	if len(s.HyperparamMutations) == 0 {
		p.addf("", "the pbt scheduler needs hyperparam_mutations = { lr = loguniform(1e-4, 1e-1) }: the config entries it may change")
	}
	p.positive(given, namedFloat{"perturbation_interval", s.PerturbationInterval},
		namedFloat{"quantile_fraction", s.QuantileFraction}, namedFloat{"resample_probability", s.ResampleProbability})
	p.positive(nil, namedFloat{"burn_in_period", s.BurnInPeriod})
	if s.QuantileFraction > 0.5 {
		p.addf("quantile_fraction", "must be in (0, 0.5]; got %v", s.QuantileFraction)
	}
	if s.ResampleProbability > 1 {
		p.addf("resample_probability", "must be in (0, 1]; got %v", s.ResampleProbability)
	}
	return p.err()
}

// PBTConfig configures population based training.
type PBTConfig struct {
	Objective
	PBTSettings
	// Seed drives donor choice and exploration.
	Seed uint64
}

// PBT is population based training (Ray's PopulationBasedTraining): every
// PerturbationInterval, a trial in the bottom quantile of the population's
// latest scores exploits a trial of the top quantile (clones its latest
// checkpoint) and explores (perturbs or resamples the donor's config).
type PBT struct {
	cfg    PBTConfig
	keys   []string // mutation paths, sorted
	trials map[string]*pbtTrial
	rng    *rand.Rand
}

type pbtTrial struct {
	config       map[string]any
	score        float64 // latest, NaN before the first
	lastPerturb  float64
	lastCkptTime float64 // time of its latest checkpoint, -1 when none
	cloned       string  // the checkpoint it last cloned (cloneOf), "" when none
	done         bool
}

// cloneOf names a donor's checkpoint at time t.
func cloneOf(donor string, t float64) string { return fmt.Sprintf("%s@%v", donor, t) }

// NewPBT returns a PBT scheduler.
func NewPBT(cfg PBTConfig) (*PBT, error) {
	if err := cfg.Objective.validate(); err != nil {
		return nil, fmt.Errorf("pbt: %w", err)
	}
	if len(cfg.HyperparamMutations) == 0 {
		return nil, fmt.Errorf("pbt: hyperparam_mutations is empty")
	}
	if cfg.PerturbationInterval == 0 {
		cfg.PerturbationInterval = 1
	}
	if cfg.QuantileFraction == 0 {
		cfg.QuantileFraction = 0.25
	}
	if cfg.QuantileFraction < 0 || cfg.QuantileFraction > 0.5 {
		return nil, fmt.Errorf("pbt: quantile_fraction must be in (0, 0.5], got %v", cfg.QuantileFraction)
	}
	if cfg.ResampleProbability == 0 {
		cfg.ResampleProbability = 0.25
	}
	if len(cfg.PerturbationFactors) == 0 {
		cfg.PerturbationFactors = []float64{1.2, 0.8}
	}
	p := &PBT{cfg: cfg, trials: map[string]*pbtTrial{}, rng: rand.New(rand.NewPCG(cfg.Seed, 0x9b7))}
	for k, m := range cfg.HyperparamMutations {
		switch x := m.(type) {
		case Domain:
		case []any:
			if len(x) == 0 {
				return nil, fmt.Errorf("pbt: mutation %q has no values", k)
			}
		default:
			return nil, fmt.Errorf("pbt: mutation %q must be a search-space function or a list, got %T", k, m)
		}
		p.keys = append(p.keys, k)
	}
	sort.Strings(p.keys)
	return p, nil
}

// OnTrialAdd registers a trial of the population.
func (p *PBT) OnTrialAdd(trial string, config map[string]any) {
	if _, ok := p.trials[trial]; ok {
		return
	}
	p.trials[trial] = &pbtTrial{config: config, score: math.NaN(), lastCkptTime: -1}
}

// OnResult records the trial's score and, every perturbation interval,
// exploits when the trial is in the bottom quantile.
func (p *PBT) OnResult(r Result) Decision {
	st, ok := p.trials[r.Trial]
	if !ok {
		p.OnTrialAdd(r.Trial, nil)
		st = p.trials[r.Trial]
	}
	st.score = p.cfg.score(r.Value)
	if r.Checkpoint {
		st.lastCkptTime = r.Time
	}
	if r.Time-st.lastPerturb < p.cfg.PerturbationInterval {
		return Decision{Action: Continue}
	}
	if r.Time < p.cfg.BurnInPeriod {
		return Decision{Action: Continue, Reason: "burn-in"}
	}
	st.lastPerturb = r.Time
	lower, upper := p.quantiles()
	if !slices.Contains(lower, r.Trial) {
		if slices.Contains(upper, r.Trial) {
			return Decision{Action: Continue, Reason: "top quantile"}
		}
		return Decision{Action: Continue, Reason: "middle"}
	}
	// A donor whose latest checkpoint is the one this trial cloned last
	// would only send it back there again: a donor that has not moved on
	// since (stopped, waiting for room) would otherwise draw a trial that
	// reached its end back to the same step at every perturbation, and a
	// run whose trials all wait on each other would never end.
	var donors []string
	for _, t := range upper {
		if ct := p.trials[t].lastCkptTime; ct >= 0 && cloneOf(t, ct) != st.cloned {
			donors = append(donors, t)
		}
	}
	if len(donors) == 0 {
		return Decision{Action: Continue, Reason: "bottom quantile, no donor has a checkpoint it has not cloned"}
	}
	donor := donors[p.rng.IntN(len(donors))]
	ds := p.trials[donor]
	cfg, how := p.explore(ds.config)
	st.config = cfg
	st.score = ds.score
	st.lastPerturb = ds.lastCkptTime
	st.lastCkptTime = ds.lastCkptTime
	st.cloned = cloneOf(donor, ds.lastCkptTime)
	return Decision{Action: Exploit, Donor: donor, Config: cfg,
		Reason: fmt.Sprintf("bottom quantile: clone %s at t=%v; %s", donor, ds.lastCkptTime, how)}
}

// OnTrialComplete removes the trial from the population.
func (p *PBT) OnTrialComplete(trial string) {
	if st, ok := p.trials[trial]; ok {
		st.done = true
	}
}

// quantiles returns the bottom and top trials by latest score, each of
// ceil(n·fraction) trials, at most n/2.
func (p *PBT) quantiles() (lower, upper []string) {
	var live []string
	for _, t := range sortedTrials(p.trials) {
		if st := p.trials[t]; !st.done && !math.IsNaN(st.score) {
			live = append(live, t)
		}
	}
	if len(live) <= 1 {
		return nil, nil
	}
	sort.SliceStable(live, func(i, j int) bool { return p.trials[live[i]].score < p.trials[live[j]].score })
	n := int(math.Ceil(float64(len(live)) * p.cfg.QuantileFraction))
	n = min(n, len(live)/2)
	return live[:n], live[len(live)-n:]
}

// explore returns a mutated copy of config and a description.
func (p *PBT) explore(config map[string]any) (map[string]any, string) {
	out := deepCopy(config).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	var how []string
	for _, k := range p.keys {
		path := strings.Split(k, "/")
		old := getPath(out, path)
		var val any
		switch m := p.cfg.HyperparamMutations[k].(type) {
		case []any:
			idx := slices.IndexFunc(m, func(v any) bool { return sameValue(v, old) })
			if idx < 0 || p.rng.Float64() < p.cfg.ResampleProbability {
				val = m[p.rng.IntN(len(m))]
			} else {
				idx += []int{-1, 1}[p.rng.IntN(2)]
				val = m[min(max(idx, 0), len(m)-1)]
			}
		case Domain:
			f, isNum := toFloat(old)
			if !isNum || p.rng.Float64() < p.cfg.ResampleProbability {
				val = m.Sample(p.rng)
			} else {
				factor := p.cfg.PerturbationFactors[p.rng.IntN(len(p.cfg.PerturbationFactors))]
				if _, isInt := old.(int); isInt {
					val = int(f * factor)
				} else {
					val = roundFloat(f * factor)
				}
			}
		}
		setPath(out, path, val)
		how = append(how, fmt.Sprintf("%s %v -> %v", k, old, val))
	}
	return out, strings.Join(how, ", ")
}

func sameValue(a, b any) bool {
	fa, oka := toFloat(a)
	fb, okb := toFloat(b)
	if oka && okb {
		return fa == fb
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}
