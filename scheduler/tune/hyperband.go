package tune

import (
	"fmt"
	"math"
)

func init() {
	registerScheduler("hyperband", true, func() SchedulerSettings { return &HyperBandSettings{} })
}

// HyperBandSettings is HyperBand (Li et al. 2018, with Ray's
// HyperBandScheduler's bracket sizes): trials are dealt into brackets in
// turn, the most aggressive first as in the paper and in BOHB (s = s_max,
// ..., 1, 0, then again; Ray starts at 0, the trials that run to max_t at
// once, which leaves BOHB without small-budget results to model early);
// bracket s takes n_s = ceil((s_max+1)/(s+1) * η^s) trials
// and runs them for r_s = max_t / η^s, then keeps the best 1/η of them for
// η times as long, and so on up to max_t (ASHA is its asynchronous
// simplification). The selection is synchronous HyperBand's, without
// pausing trials: a trial that reaches a rung goes on at once unless it
// is already certain to be cut (as many trials of its bracket as the rung
// keeps did better there); once every trial of a full bracket has reached
// the rung, the ones it cuts are stopped at their next report. Use it with
// search_alg = "bohb" for BOHB.
type HyperBandSettings struct {
	// MaxT is the time a trial runs at most (default 81).
	MaxT float64 `json:"max_t,omitempty"`
	// ReductionFactor is η (default 3).
	ReductionFactor float64 `json:"reduction_factor,omitempty"`
}

// Kind is "hyperband".
func (HyperBandSettings) Kind() string { return "hyperband" }

// validate reports every problem of the settings; given are the settings
// written (a 0 there is no default).
func (s HyperBandSettings) validate(given givenKeys) error {
	var p problems
	p.positive(given, namedFloat{"max_t", s.MaxT}, namedFloat{"reduction_factor", s.ReductionFactor})
	if s.ReductionFactor > 0 && s.ReductionFactor <= 1 {
		p.addf("reduction_factor", "must exceed 1; got %v", s.ReductionFactor)
	}
	return p.err()
}

// Build returns the scheduler.
func (s HyperBandSettings) Build(o Objective, _ uint64) (Scheduler, error) {
	if err := s.validate(nil); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("hyperband: %w", err)
	}
	if s.MaxT == 0 {
		s.MaxT = 81
	}
	if s.ReductionFactor == 0 {
		s.ReductionFactor = 3
	}
	return &HyperBand{cfg: s, obj: o, sMax1: int(math.Round(math.Log(s.MaxT)/math.Log(s.ReductionFactor))) + 1,
		of: map[string]*hbBracket{}}, nil
}

// HyperBand is the scheduler HyperBandSettings builds.
type HyperBand struct {
	cfg      HyperBandSettings
	obj      Objective
	sMax1    int
	brackets []*hbBracket
	of       map[string]*hbBracket
}

type hbBracket struct {
	s        int
	size     int       // trials it takes
	rungs    []float64 // milestones below max_t
	keep     []int     // trials each rung keeps
	trials   []string
	live     map[string]bool         // added and not ended before reaching every rung
	scores   []map[string]float64    // per rung: each trial's score there
	cut      map[string]string       // trials a full rung cut: the reason
	reported map[string]map[int]bool // rungs each trial has reached
}

func (h *HyperBand) newBracket() *hbBracket {
	s := h.sMax1 - 1 - len(h.brackets)%h.sMax1
	eta := h.cfg.ReductionFactor
	r0 := math.Floor(h.cfg.MaxT * math.Pow(eta, -float64(s)))
	for r0 < 1 && s > 0 { // too small a budget: take the next, less aggressive bracket
		s--
		r0 = math.Floor(h.cfg.MaxT * math.Pow(eta, -float64(s)))
	}
	n := int(math.Ceil(float64(h.sMax1) / float64(s+1) * math.Pow(eta, float64(s))))
	b := &hbBracket{s: s, size: n, live: map[string]bool{}, cut: map[string]string{}, reported: map[string]map[int]bool{}}
	r := r0
	for i := 0; i < s && r < h.cfg.MaxT; i++ {
		n = int(math.Ceil(float64(n) / eta))
		b.rungs = append(b.rungs, r)
		b.keep = append(b.keep, n)
		b.scores = append(b.scores, map[string]float64{})
		r = math.Min(r*eta, h.cfg.MaxT)
	}
	h.brackets = append(h.brackets, b)
	return b
}

// OnTrialAdd deals the trial into the current bracket, or a new one.
func (h *HyperBand) OnTrialAdd(trial string, _ map[string]any) {
	var b *hbBracket
	if n := len(h.brackets); n > 0 && len(h.brackets[n-1].trials) < h.brackets[n-1].size {
		b = h.brackets[n-1]
	} else {
		b = h.newBracket()
	}
	b.trials = append(b.trials, trial)
	b.live[trial] = true
	b.reported[trial] = map[int]bool{}
	h.of[trial] = b
}

// OnResult records the result at each rung it reaches and decides.
func (h *HyperBand) OnResult(r Result) Decision {
	b := h.of[r.Trial]
	if b == nil {
		return Decision{Action: Continue}
	}
	if r.Time >= h.cfg.MaxT { // its whole budget is spent, cut or not
		return Decision{Action: Stop, Reason: fmt.Sprintf("reached max_t %v", h.cfg.MaxT), Finished: true}
	}
	if why, ok := b.cut[r.Trial]; ok {
		return Decision{Action: Stop, Reason: why}
	}
	score := h.obj.score(r.Value)
	if math.IsNaN(score) {
		score = math.Inf(-1)
	}
	d := Decision{Action: Continue}
	for i, m := range b.rungs {
		if r.Time < m || b.reported[r.Trial][i] {
			continue
		}
		b.reported[r.Trial][i] = true
		b.scores[i][r.Trial] = score
		better := 0
		for t, v := range b.scores[i] {
			if t != r.Trial && v > score {
				better++
			}
		}
		if better >= b.keep[i] {
			d = Decision{Action: Stop, Reason: fmt.Sprintf("bracket %d rung %v: %s %.6g behind %d that the rung keeps %d of", b.s, m, h.obj.Metric, r.Value, better, b.keep[i])}
		} else {
			d.Reason = fmt.Sprintf("bracket %d rung %v: %s %.6g ranks %d of %d so far", b.s, m, h.obj.Metric, r.Value, better+1, len(b.scores[i]))
		}
		h.cutFull(b, i)
		if d.Action == Stop {
			return d
		}
	}
	if why, ok := b.cut[r.Trial]; ok {
		return Decision{Action: Stop, Reason: why}
	}
	return d
}

// cutFull marks the trials that a rung cuts once every live trial of a
// full bracket has reached it.
func (h *HyperBand) cutFull(b *hbBracket, i int) {
	if len(b.trials) < b.size {
		return
	}
	for t := range b.live {
		if !b.reported[t][i] {
			return
		}
	}
	ranked := sortedTrials(b.scores[i])
	// best first; ties in trial order
	for x := 1; x < len(ranked); x++ {
		for y := x; y > 0 && b.scores[i][ranked[y]] > b.scores[i][ranked[y-1]]; y-- {
			ranked[y], ranked[y-1] = ranked[y-1], ranked[y]
		}
	}
	for k, t := range ranked {
		if k >= b.keep[i] {
			if _, done := b.cut[t]; !done {
				b.cut[t] = fmt.Sprintf("bracket %d rung %v: cut, ranked %d of %d", b.s, b.rungs[i], k+1, len(ranked))
			}
		}
	}
}

// OnTrialComplete takes the trial out of its bracket's live trials, so
// that rungs it never reached do not wait for it.
func (h *HyperBand) OnTrialComplete(trial string) {
	b := h.of[trial]
	if b == nil {
		return
	}
	delete(b.live, trial)
	for i := range b.rungs {
		h.cutFull(b, i)
	}
}
