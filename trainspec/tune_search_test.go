package trainspec

import (
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/shoenig/test/must"
)

// search_alg is an attribute or a block; its settings reach the searcher
// as JSON with the metric, and what the searcher finds wrong is reported
// at the setting it names.
func TestTuneSearchAlg(t *testing.T) {
	head := "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\ntune {\nmetric = \"loss\"\nmode = \"min\"\n"
	for _, tc := range []struct {
		name, body        string
		err               error
		wantType, wantSet string
		wantSummary       string
		wantLine          int
	}{
		{name: "default", body: "", wantType: "random"},
		{name: "legacy searcher", body: `searcher = "grid"`, wantType: "grid"},
		{name: "attribute", body: `search_alg = "tpe"`, wantType: "tpe"},
		{name: "block", body: "search_alg {\ntype = \"tpe\"\nn_startup_trials = 5\n}", wantType: "tpe", wantSet: `{"n_startup_trials":5}`},
		{name: "bad setting", body: "search_alg {\ntype = \"tpe\"\nn_startup = 5\n}", err: keyedErr{"n_startup", "the tpe searcher has no setting \"n_startup\""},
			wantType: "tpe", wantSet: `{"n_startup":5}`, wantSummary: "Invalid search_alg setting", wantLine: 8},
		{name: "bad type", body: `search_alg = "tp"`, err: keyedErr{"type", "unknown searcher \"tp\""}, wantType: "tp", wantSummary: "Invalid search_alg", wantLine: 6},
		{name: "both forms", body: "search_alg = \"tpe\"\nsearch_alg {\ntype = \"tpe\"\n}", wantSummary: "Duplicate search_alg", wantLine: 6},
		{name: "with searcher", body: "searcher = \"grid\"\nsearch_alg = \"tpe\"", wantSummary: "Conflicting searcher", wantLine: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gotSet string
			spec, diags := Parse([]byte(head+tc.body+"\n}\n}\n"), "train.hcl", ParseOptions{
				CheckSearcher: func(kind, metric string, settings []byte) error {
					must.EqOp(t, "loss", metric)
					gotSet = string(settings)
					return tc.err
				}})
			if tc.wantSummary != "" {
				must.SliceLen(t, 1, diags.Errs(), must.Sprint(diags.Error()))
				d := diags.Errs()[0].(*hcl.Diagnostic)
				must.EqOp(t, tc.wantSummary, d.Summary, must.Sprint(diags.Error()))
				must.EqOp(t, tc.wantLine, d.Subject.Start.Line)
				return
			}
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			must.EqOp(t, tc.wantType, spec.Tune.SearchAlg.Type)
			must.EqOp(t, tc.wantType, spec.Tune.Searcher)
			must.EqOp(t, tc.wantSet, string(spec.Tune.SearchAlg.SettingsJSON))
			must.EqOp(t, tc.wantSet, gotSet)
		})
	}
}

// The quantised, log-integer and normal search-space functions reach the
// config in their JSON form.
func TestTuneFunctionsMore(t *testing.T) {
	src := "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\nconfig = {\na = qloguniform(1e-4, 1e-1, 1e-4)\nb = qrandint(16, 128, 16)\nc = randn(0, 1)\nd = qrandn(0, 1, 0.5)\ne = lograndint(8, 1024)\nf = qlograndint(16, 512, 16)\n}\ntune {}\n}\n"
	spec, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	must.EqOp(t, `{"a":{"qloguniform":[0.0001,0.1,0.0001]},"b":{"qrandint":[16,128,16]},"c":{"randn":[0,1]},"d":{"qrandn":[0,1,0.5]},`+
		`"e":{"lograndint":[8,1024]},"f":{"qlograndint":[16,512,16]}}`, string(spec.ConfigJSON))
	for _, bad := range []string{"qloguniform(0, 1, 0.1)", "qrandint(1, 10, 0)", "randn(0, 0)", "qrandint(1.5, 10, 1)",
		"lograndint(0, 10)", "lograndint(1.5, 10)", "qlograndint(16, 512, 0)", "lograndint(10, 2)"} {
		_, diags := Parse([]byte("train \"x\" {\nentrypoint { builtin = \"quickstart\" }\nconfig = { a = "+bad+" }\ntune {}\n}\n"), "train.hcl", ParseOptions{})
		must.True(t, diags.HasErrors(), must.Sprint(bad))
	}
}

// An experiment's trials keep one checkpoint unless the spec says how
// many (0 keeps all); a plain run keeps all, as before.
func TestTuneKeepsOneCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name, run, tune string
		want            int
	}{
		{"tune default", "", "tune {}", 1},
		{"tune with checkpoint block", "run {\ncheckpoint { score_attribute = \"loss\" }\n}", "tune {}", 1},
		{"tune keeps all", "run {\ncheckpoint { num_to_keep = 0 }\n}", "tune {}", 0},
		{"tune keeps 3", "run {\ncheckpoint { num_to_keep = 3 }\n}", "tune {}", 3},
		{"plain run", "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\n" + tc.run + "\n" + tc.tune + "\n}\n"
			spec, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			must.EqOp(t, tc.want, spec.Run.Checkpoint.NumToKeep)
		})
	}
}
