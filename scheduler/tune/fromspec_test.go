package tune

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainspec"
)

// A tune block's stop map, stop_on_plateau, time_attr and fail_fast
// reach the tuner's Config as written.
func TestFromSpecStopPlateauAndFailFast(t *testing.T) {
	spec, diags := trainspec.Parse([]byte(`
train "x" {
  entrypoint { builtin = "quickstart" }
  config = { lr = uniform(0.01, 0.1) }
  tune {
    metric    = "loss"
    mode      = "min"
    time_attr = "time_total_s"
    fail_fast = true
    stop      = { time_total_s = 600, loss = { at_most = 0.05 } }
    stop_on_plateau {
      std = 0.001
    }
  }
}
`), "train.hcl", trainspec.ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	x, err := FromSpec(spec)
	must.NoError(t, err)
	must.EqOp(t, TimeTotal, x.Config.TimeAttr)
	must.True(t, x.Config.FailFast)
	must.Eq(t, []StopCriterion{{Metric: "loss", Value: 0.05, AtMost: true}, {Metric: TimeTotal, Value: 600}}, x.Config.Stop)
	must.Eq(t, &PlateauStop{Metric: "loss", Std: 0.001, NumResults: 4, GracePeriod: 4}, x.Config.Plateau)
}

// validate reports every problem of a tune block's scheduler and
// search_alg, each at its setting, even beside other errors in the block:
// the plugins' settings are checked whatever else is wrong, and a plugin
// reports all its problems, not its first.
func TestSpecPluginSettingsAllReported(t *testing.T) {
	const head = "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\ntune {\nmetric = \"loss\"\nmode = \"min\"\n"
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"every setting", `scheduler {
  type             = "asha"
  max_t            = 0
  grace_period     = -1
  reduction_factor = 1
}
search_alg {
  type             = "tpe"
  n_startup_trials = -5
}
stop = { loss = "low" }`, []string{
			"train.hcl:8,3-23: Invalid scheduler setting; Must be a positive number; got 0.",
			"train.hcl:9,3-24: Invalid scheduler setting; Must be a positive number; got -1.",
			"train.hcl:10,3-23: Invalid scheduler setting; Must exceed 1; got 1.",
			"train.hcl:14,3-24: Invalid search_alg setting; Must not be negative; got -5.",
			"train.hcl:16,10-14: Invalid stop criterion; ",
		}},
		{"unknown settings together", "scheduler {\ntype = \"hyperband\"\nrungs = 3\nbogus = 1\nreduction_factor = 0.5\n}", []string{
			"train.hcl:9,1-10: Invalid scheduler setting; The hyperband scheduler has no setting \"bogus\"; it takes max_t, reduction_factor.",
			"train.hcl:8,1-10: Invalid scheduler setting; The hyperband scheduler has no setting \"rungs\"; it takes max_t, reduction_factor.",
		}},
		{"grace beyond max_t", "scheduler {\ntype = \"asha\"\nmax_t = 5\ngrace_period = 10\n}", []string{
			"train.hcl:9,1-18: Invalid scheduler setting; Must be at most max_t (5); got 10.",
		}},
		{"a wrong setting value is not checked", "scheduler {\ntype = \"asha\"\nmax_t = var.nope\ngrace_period = -1\n}", []string{
			"train.hcl:8,12-17: Unsupported attribute; ",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := trainspec.Parse([]byte(head+tc.body+"\n}\n}\n"), "train.hcl", trainspec.ParseOptions{
				CheckScheduler: CheckScheduler, CheckSearcher: CheckSearcher})
			var got []string
			for _, d := range diags {
				got = append(got, d.Subject.String()+": "+d.Summary+"; "+d.Detail)
			}
			must.SliceLen(t, len(tc.want), got, must.Sprint(got))
			for i, w := range tc.want {
				must.StrHasPrefix(t, w, got[i])
			}
		})
	}
}

// A spec whose search_alg cannot enumerate its grid_search is refused by
// validate at the grid_search, and by FromSpec for a spec parsed without
// the check.
func TestSpecGridSearchWithTPE(t *testing.T) {
	src := []byte("train \"x\" {\nentrypoint { builtin = \"quickstart\" }\nconfig = {\n  lr = grid_search([0.1, 0.01])\n  m  = uniform(0, 1)\n}\n" +
		"tune {\nmetric = \"loss\"\nmode = \"min\"\nsearch_alg = \"tpe\"\n}\n}\n")
	_, diags := trainspec.Parse(src, "train.hcl", trainspec.ParseOptions{CheckGridSearch: CheckGridSearch})
	must.SliceLen(t, 1, diags, must.Sprint(diags.Error()))
	must.EqOp(t, "train.hcl:4,8-32: Grid search with this searcher", diags[0].Subject.String()+": "+diags[0].Summary)
	must.StrContains(t, diags[0].Detail, "the tpe searcher samples every value from its model")

	spec, diags := trainspec.Parse(src, "train.hcl", trainspec.ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	_, err := FromSpec(spec)
	must.ErrorIs(t, err, ErrGridSearch)
	must.StrHasPrefix(t, "config: lr: ", err.Error())
}

// Trials counts the trials as the tuner makes them: samples times the
// grid for the variant generator's searchers, samples for a model's.
func TestExperimentTrials(t *testing.T) {
	for _, tc := range []struct {
		name, config, tune string
		want               int
	}{
		{"random, a 2x2 grid", "a = grid_search([1, 2])\nb = grid_search([3, 4])\nc = uniform(0, 1)", "num_samples = 2", 8},
		{"random, no grid", "c = uniform(0, 1)", "num_samples = 3", 3},
		{"grid searcher enumerates choices", "a = choice([1, 2, 3])\nb = grid_search([3, 4])", "num_samples = 2\nsearcher = \"grid\"", 12},
		{"tpe", "c = uniform(0, 1)", "num_samples = 5\nmetric = \"loss\"\nmode = \"min\"\nsearch_alg = \"tpe\"", 5},
		{"unlimited", "c = uniform(0, 1)", "num_samples = -1\ntime_budget = \"1h\"", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\nconfig = {\n" + tc.config + "\n}\ntune {\n" + tc.tune + "\n}\n}\n"
			spec, diags := trainspec.Parse([]byte(src), "train.hcl", trainspec.ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			x, err := FromSpec(spec)
			must.NoError(t, err)
			n, err := x.Trials()
			must.NoError(t, err)
			must.EqOp(t, tc.want, n)
		})
	}
}
