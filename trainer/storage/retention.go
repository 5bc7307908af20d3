package storage

import (
	"encoding/json"
	"math"
	"slices"
)

// Rank orders the records of existing checkpoints (given in commit order)
// from best to worst under p: by the score attribute in the score order, or
// by recency when p has no score attribute. Records whose score is missing,
// not a number or NaN rank below all scored ones; ties go to the more recent
// checkpoint. The input is not modified.
func Rank(live []Record, p Policy) []Record {
	type entry struct {
		rec    Record
		pos    int
		score  float64
		scored bool
	}
	es := make([]entry, len(live))
	for i, rec := range live {
		es[i] = entry{rec: rec, pos: i}
		if p.ScoreAttribute != "" {
			es[i].score, es[i].scored = Score(rec, p.ScoreAttribute)
		}
	}
	sign := 1.0
	if p.ScoreOrder == ScoreMin {
		sign = -1
	}
	slices.SortStableFunc(es, func(a, b entry) int {
		if p.ScoreAttribute != "" {
			switch {
			case a.scored && !b.scored:
				return -1
			case !a.scored && b.scored:
				return 1
			case a.scored && b.scored && a.score != b.score:
				if sign*a.score > sign*b.score {
					return -1
				}
				return 1
			}
		}
		return b.pos - a.pos // more recent first
	})
	out := make([]Record, len(es))
	for i, e := range es {
		out[i] = e.rec
	}
	return out
}

// Prune decides retention: given the records of the checkpoints that exist,
// in commit order (the last one is the latest), it returns the names of the
// checkpoints to delete, in commit order. It keeps the NumToKeep best under
// Rank and always the latest; NumToKeep 0 keeps everything.
func Prune(live []Record, p Policy) []string {
	if p.NumToKeep <= 0 || len(live) <= p.NumToKeep {
		return nil
	}
	keep := map[string]bool{live[len(live)-1].Checkpoint: true}
	for _, rec := range Rank(live, p)[:p.NumToKeep] {
		keep[rec.Checkpoint] = true
	}
	var del []string
	for _, rec := range live {
		if !keep[rec.Checkpoint] {
			del = append(del, rec.Checkpoint)
		}
	}
	return del
}

// Score reads metric attr of rec as a number. It accepts every Go numeric
// type and json.Number; NaN and anything else is not a score.
func Score(rec Record, attr string) (float64, bool) {
	var f float64
	switch v := rec.Metrics[attr].(type) {
	case float64:
		f = v
	case float32:
		f = float64(v)
	case int:
		f = float64(v)
	case int8:
		f = float64(v)
	case int16:
		f = float64(v)
	case int32:
		f = float64(v)
	case int64:
		f = float64(v)
	case uint:
		f = float64(v)
	case uint8:
		f = float64(v)
	case uint16:
		f = float64(v)
	case uint32:
		f = float64(v)
	case uint64:
		f = float64(v)
	case json.Number:
		var err error
		if f, err = v.Float64(); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// Newest returns the record of the newest checkpoint of live (as Best
// gives them): the one of the highest step, which is unique among a run's
// live checkpoints (a restart drops the records after the step it
// resumes from). ok is false when live is empty.
func Newest(live []Record) (r Record, ok bool) {
	for _, l := range live {
		if !ok || l.Step > r.Step {
			r, ok = l, true
		}
	}
	return r, ok
}

// best returns up to n of live ranked best first by Rank (all with
// n <= 0): what both stores' Best answer.
func best(live []Record, p Policy, n int) []Record {
	ranked := Rank(live, p)
	if n > 0 && n < len(ranked) {
		ranked = ranked[:n]
	}
	return ranked
}
