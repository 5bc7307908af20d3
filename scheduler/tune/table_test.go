package tune

import (
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
