package tune

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// A config prints on one line as key=value with sorted keys, each value
// as results.csv writes it: numbers in full, strings as they are, lists
// and maps as JSON.
func TestFormatConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		want string
	}{
		{"empty", map[string]any{}, ""},
		{"scalars", map[string]any{"lr": 0.0123456789, "batch_size": 16, "act": "relu", "bias": true},
			"act=relu batch_size=16 bias=true lr=0.0123456789"},
		{"nested", map[string]any{"opt": map[string]any{"lr": 0.1, "momentum": 0.9}, "layers": []any{8, 4}},
			`layers=[8,4] opt={"lr":0.1,"momentum":0.9}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must.EqOp(t, tc.want, FormatConfig(tc.cfg))
		})
	}
}

// A trial's parameters print as its config now has them: after a PBT
// exploit, the donor's mutated values, not those sampled at its start;
// in the table, results.csv and the dashboard alike.
func TestTablesShowTheConfigATrialGoesOnWith(t *testing.T) {
	st := &ExperimentState{Name: "pbt", Trials: []*TrialState{
		{ID: "trial_0000", Status: StatusTerminated, Params: map[string]any{"opt/lr": 1e-07},
			Config: map[string]any{"opt": map[string]any{"lr": 0.05}}, LastResult: map[string]any{"loss": 0.5},
			Exploits: []ExploitRecord{{Donor: "trial_0001", Time: 4}}},
		{ID: "trial_0001", Status: StatusTerminated, Params: map[string]any{"opt/lr": 0.1},
			Config: map[string]any{"opt": map[string]any{"lr": 0.1}}, LastResult: map[string]any{"loss": 0.4}},
	}}
	must.Eq(t, map[string]any{"opt/lr": 0.05}, st.Trials[0].ParamsNow()) // what the dashboard shows
	var b strings.Builder
	WriteTable(&b, st, "loss")
	must.StrContains(t, b.String(), "trial_0000  TERMINATED  0.05")
	must.StrNotContains(t, b.String(), "1e-07")

	var csv strings.Builder
	g := &ResultGrid{Trials: []TrialResult{{ID: "trial_0000", Status: StatusTerminated, Params: st.Trials[0].Params,
		Config: st.Trials[0].Config}}}
	must.NoError(t, g.WriteCSV(&csv))
	must.StrContains(t, csv.String(), "trial_0000,TERMINATED,0,0.05,")
}

// The live table shows at most so many trials: the running, the failed,
// then the best finished ones by the state's metric, in trial order, and
// counts the others by status.
func TestTableRowsBounded(t *testing.T) {
	st := &ExperimentState{Name: "big", Metric: "loss", Mode: ModeMin}
	for i := range 30 {
		ts := &TrialState{ID: fmt.Sprintf("trial_%04d", i), Status: StatusTerminated,
			LastResult: map[string]any{"loss": math.Abs(float64(i - 13))}}
		switch i {
		case 27:
			ts.Status = StatusRunning
		case 28:
			ts.Status, ts.LastResult = StatusError, nil
		case 29:
			ts.Status, ts.LastResult = StatusPending, nil
		}
		st.Trials = append(st.Trials, ts)
	}
	ids := func(maxRows int) []string {
		var b strings.Builder
		writeTable(&b, st, "loss", "", maxRows)
		var out []string
		for _, m := range regexp.MustCompile(`(?m)^(trial_\d+)`).FindAllStringSubmatch(b.String(), -1) {
			out = append(out, m[1])
		}
		if maxRows > 0 {
			must.StrContains(t, b.String(), "\n... 25 more not shown (1 PENDING, 24 TERMINATED)\n")
		}
		return out
	}
	must.Eq(t, []string{"trial_0012", "trial_0013", "trial_0014", "trial_0027", "trial_0028"}, ids(5))
	st.Mode = ModeMax
	must.Eq(t, []string{"trial_0000", "trial_0001", "trial_0026", "trial_0027", "trial_0028"}, ids(5))
	must.SliceLen(t, 30, ids(0)) // WriteTable's: all of them
}
