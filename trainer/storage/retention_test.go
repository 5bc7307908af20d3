package storage

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

// ckpts builds checkpoint records 0..n-1 with the given scores under "acc";
// a nil score leaves the metric out.
func ckpts(scores ...any) []Record {
	out := make([]Record, len(scores))
	for i, s := range scores {
		m := map[string]any{}
		if s != nil {
			m["acc"] = s
		}
		out[i] = Record{Step: int64(i), Checkpoint: checkpointName(int64(i)), Metrics: m}
	}
	return out
}

func names(idx ...int64) []string {
	var out []string
	for _, i := range idx {
		out = append(out, checkpointName(i))
	}
	return out
}

func TestPrune(t *testing.T) {
	maxAcc := func(n int) Policy { return Policy{NumToKeep: n, ScoreAttribute: "acc", ScoreOrder: ScoreMax} }
	minAcc := func(n int) Policy { return Policy{NumToKeep: n, ScoreAttribute: "acc", ScoreOrder: ScoreMin} }
	cases := []struct {
		name   string
		live   []Record
		policy Policy
		want   []string
	}{
		{"keep all with 0", ckpts(0.1, 0.2, 0.3), Policy{}, nil},
		{"keep all with 0 and score", ckpts(0.1, 0.2, 0.3), maxAcc(0), nil},
		{"empty", nil, maxAcc(1), nil},
		{"fewer than num_to_keep", ckpts(0.1, 0.2), maxAcc(3), nil},
		{"exactly num_to_keep", ckpts(0.1, 0.2, 0.3), maxAcc(3), nil},
		{"recency keep 1", ckpts(nil, nil, nil), Policy{NumToKeep: 1}, names(0, 1)},
		{"recency keep 2 of 4", ckpts(9, 8, 7, 6), Policy{NumToKeep: 2}, names(0, 1)},
		{"recency ignores scores without attribute", ckpts(0.9, 0.1, 0.2), Policy{NumToKeep: 1, ScoreOrder: ScoreMax}, names(0, 1)},
		{"max keep 2", ckpts(0.5, 0.9, 0.1, 0.7), maxAcc(2), names(0, 2)},
		{"min keep 2 keeps latest too", ckpts(0.5, 0.9, 0.1, 0.7), minAcc(2), names(1)},
		{"empty order means max", ckpts(0.5, 0.9, 0.1, 0.7), Policy{NumToKeep: 2, ScoreAttribute: "acc"}, names(0, 2)},
		{"latest kept when worst (max)", ckpts(0.9, 0.1), maxAcc(1), nil},
		{"latest kept when worst, others go", ckpts(0.9, 0.5, 0.1), maxAcc(1), names(1)},
		{"latest kept when worst (min)", ckpts(0.1, 0.5, 0.9), minAcc(1), names(1)},
		{"latest best keeps only best", ckpts(0.1, 0.5, 0.9), maxAcc(1), names(0, 1)},
		{"keep N with latest worst", ckpts(0.3, 0.9, 0.8, 0.2, 0.1), maxAcc(2), names(0, 3)},
		{"missing and non-numeric rank worst", ckpts(nil, 0.3, "high", math.NaN(), 0.2, 0.25), maxAcc(1), names(0, 2, 3, 4)},
		{"missing rank worst under min too", ckpts(nil, 0.3, 0.2), minAcc(1), names(0, 1)},
		{"ties go to the newer", ckpts(0.5, 0.5, 0.1), maxAcc(1), names(0)},
		{"mixed numeric types", ckpts(int64(3), float32(5), json.Number("4"), uint8(1), 2), maxAcc(2), names(0, 3)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, Prune(tc.live, tc.policy))
		})
	}
}

func TestRank(t *testing.T) {
	cases := []struct {
		name   string
		live   []Record
		policy Policy
		want   []string
	}{
		{"recency", ckpts(0.1, 0.9, 0.5), Policy{}, names(2, 1, 0)},
		{"max", ckpts(0.1, 0.9, 0.5), Policy{ScoreAttribute: "acc"}, names(1, 2, 0)},
		{"min", ckpts(0.1, 0.9, 0.5), Policy{ScoreAttribute: "acc", ScoreOrder: ScoreMin}, names(0, 2, 1)},
		{"unscored last, newest first", ckpts(nil, 0.2, nil, 0.1), Policy{ScoreAttribute: "acc"}, names(1, 3, 2, 0)},
		{"negative and infinite", ckpts(-1.0, math.Inf(1), math.Inf(-1)), Policy{ScoreAttribute: "acc"}, names(1, 0, 2)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]Record(nil), tc.live...)
			var got []string
			for _, rec := range Rank(tc.live, tc.policy) {
				got = append(got, rec.Checkpoint)
			}
			must.Eq(t, tc.want, got)
			must.Eq(t, in, tc.live, must.Sprint("Rank modified its input"))
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	cases := []struct {
		name string
		p    Policy
		ok   bool
	}{
		{"zero", Policy{}, true},
		{"full", Policy{NumToKeep: 3, ScoreAttribute: "loss", ScoreOrder: ScoreMin, Fsync: FsyncCheckpointRecords}, true},
		{"negative keep", Policy{NumToKeep: -1}, false},
		{"bad order", Policy{ScoreOrder: "desc"}, false},
		{"bad fsync", Policy{Fsync: 7}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			if tc.ok {
				must.NoError(t, err)
			} else {
				must.Error(t, err)
			}
		})
	}
}

func TestNewest(t *testing.T) {
	_, ok := Newest(nil)
	must.False(t, ok)
	r, ok := Newest([]Record{{Step: 3, Checkpoint: "c3"}, {Step: 9, Checkpoint: "c9"}, {Step: 5, Checkpoint: "c5"}})
	must.True(t, ok)
	must.EqOp(t, "c9", r.Checkpoint)
}
