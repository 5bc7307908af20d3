package trainspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/shoenig/test/must"
)

const tuneSpec = `
train "qs-tune" {
  entrypoint { builtin = "quickstart" }
  config = {
    lr         = loguniform(1e-4, 1e-1)
    momentum   = uniform(0.5, 0.99)
    batch_size = choice([16, 32, 64])
    layers     = grid_search([1, 2])
    steps      = quniform(10, 100, 10)
    seed       = randint(0, 1000)
    epochs     = 9
  }
  tune {
    num_samples           = 8
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
    time_budget           = "30m"
    seed                  = 7
    max_failures          = 1
    fail_fast             = true
    stop = {
      training_iteration = 20
      loss               = { at_most = 0.05 }
      "val/acc"          = { at_least = 0.9 }
    }
    scheduler {
      type             = "asha"
      max_t            = 9
      grace_period     = 1
      reduction_factor = 3
    }
  }
}
`

func TestTuneBlock(t *testing.T) {
	spec, diags := Parse([]byte(tuneSpec), "train.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	must.NotNil(t, spec.Tune)
	tu := spec.Tune
	must.EqOp(t, 8, tu.NumSamples)
	must.EqOp(t, 2, tu.MaxConcurrentTrials)
	must.EqOp(t, "loss", tu.Metric)
	must.EqOp(t, "min", tu.Mode)
	must.EqOp(t, 30*time.Minute, tu.TimeBudget)
	must.EqOp(t, 7, tu.Seed)
	must.EqOp(t, 1, tu.MaxFailures)
	must.True(t, tu.FailFast)
	must.EqOp(t, "random", tu.Searcher)
	must.EqOp(t, "asha", tu.Scheduler.Type)
	must.Eq(t, []TuneStop{{Metric: "loss", Value: 0.05, AtMost: true}, {Metric: "training_iteration", Value: 20},
		{Metric: "val/acc", Value: 0.9}}, tu.Stop)
	must.EqOp(t, `{"grace_period":1,"max_t":9,"reduction_factor":3}`, string(tu.Scheduler.SettingsJSON))
	must.EqOp(t, `{"batch_size":{"choice":[16,32,64]},"epochs":9,"layers":{"grid_search":[1,2]},`+
		`"lr":{"loguniform":[0.0001,0.1]},"momentum":{"uniform":[0.5,0.99]},"seed":{"randint":[0,1000]},`+
		`"steps":{"quniform":[10,100,10]}}`, string(spec.ConfigJSON))

	// Without the tune block, the search space is an error: a plain run
	// would hand the functions' objects to the training function.
	_, diags = Parse([]byte(tuneSpec[:strings.Index(tuneSpec, "  tune {")]+"}\n"), "train.hcl", ParseOptions{})
	must.EqOp(t, "Search space without a tune block", diags.Errs()[0].(*hcl.Diagnostic).Summary)

	// A spec with neither has no Tune.
	plain, diags := Parse([]byte("train \"p\" {\nentrypoint { builtin = \"quickstart\" }\nconfig = { lr = 0.1 }\n}\n"), "train.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	must.Nil(t, plain.Tune)
}

func TestTuneBlockPBT(t *testing.T) {
	spec, diags := Parse([]byte(`
train "pbt" {
  entrypoint { builtin = "quickstart" }
  config = { lr = 0.01, batch_size = 32 }
  tune {
    metric = "loss"
    mode   = "max"
    searcher = "grid"
    scheduler {
      type                  = "pbt"
      perturbation_interval = 2
      hyperparam_mutations  = { lr = loguniform(1e-4, 1e-1), batch_size = [16, 32, 64] }
    }
  }
}`), "train.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	must.EqOp(t, "grid", spec.Tune.Searcher)
	must.EqOp(t, `{"hyperparam_mutations":{"batch_size":[16,32,64],"lr":{"loguniform":[0.0001,0.1]}},"perturbation_interval":2}`,
		string(spec.Tune.Scheduler.SettingsJSON))
}

func TestTuneBlockErrors(t *testing.T) {
	for _, tc := range []struct{ name, body, summary string }{
		{"bad mode", "tune {\nmetric = \"loss\"\nmode = \"up\"\n}", "Invalid value"},
		{"metric without mode", `tune { metric = "loss" }`, "Metric and mode go together"},
		{"bad budget", `tune { time_budget = "soon" }`, "Invalid duration"},
		{"scheduler without type", `tune {` + "\n" + `scheduler { max_t = 3 }` + "\n" + `}`, "Missing required argument"},
		{"scheduler with a block", `tune {` + "\n" + `scheduler {` + "\n" + `type = "asha"` + "\n" + `x {}` + "\n" + `}` + "\n" + `}`, "Unexpected \"x\" block"},
		{"zero samples", `tune { num_samples = 0 }`, "Invalid value"},
		{"samples below -1", `tune { num_samples = -2 }`, "Invalid value"},
		{"unlimited samples without a budget", `tune { num_samples = -1 }`, "Missing time_budget"},
		{"stop not a map", `tune { stop = 10 }`, "Invalid stop"},
		{"stop as a string", `tune { stop = { loss = "0.05" } }`, "Invalid stop criterion"},
		{"loguniform at zero", `config = { lr = loguniform(0, 1) }`, "Invalid function argument"},
		{"uniform reversed", `config = { lr = uniform(1, 0) }`, "Invalid function argument"},
		{"choice of a number", `config = { lr = choice(3) }`, "Invalid function argument"},
		{"empty grid", `config = { lr = grid_search([]) }`, "Invalid function argument"},
		{"space without tune", `config = { opt = { lr = loguniform(1e-4, 1e-1) } }`, "Search space without a tune block"},
		{"randn without tune", `config = { opt = { lr = randn(0, 1) } }`, "Search space without a tune block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\n" + tc.body + "\n}\n"
			_, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
			must.True(t, diags.HasErrors())
			must.EqOp(t, tc.summary, diags.Errs()[0].(*hcl.Diagnostic).Summary, must.Sprint(diags.Error()))
		})
	}
}

func TestTuneUnlimitedSamples(t *testing.T) {
	src := "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\ntune {\n  num_samples = -1\n  time_budget = \"90s\"\n}\n}\n"
	spec, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	must.EqOp(t, UnlimitedSamples, spec.Tune.NumSamples)
	must.EqOp(t, 90*time.Second, spec.Tune.TimeBudget)

	// Without the budget the error points at num_samples.
	_, diags = Parse([]byte("train \"x\" {\nentrypoint { builtin = \"quickstart\" }\ntune {\n  num_samples = -1\n}\n}\n"), "train.hcl", ParseOptions{})
	must.True(t, diags.HasErrors())
	must.StrContains(t, diags.Error(), "train.hcl:4,")
	must.StrContains(t, diags.Error(), `time_budget = "2h"`)
}

// keyedErr is an error about one setting, as a scheduler reports it.
type keyedErr struct{ key, msg string }

func (e keyedErr) Error() string      { return e.msg }
func (e keyedErr) SettingKey() string { return e.key }

// The scheduler owns its settings: the spec hands them over as JSON with
// the tune block's metric, and reports what the scheduler finds wrong at
// the setting (or the type, or the block) it names.
func TestTuneSchedulerChecked(t *testing.T) {
	src := `train "x" {
  entrypoint { builtin = "quickstart" }
  tune {
    metric = "loss"
    mode   = "min"
    scheduler {
      type  = "asha"
      max_t = 9
      rungs = 3
    }
  }
}
`
	for _, tc := range []struct {
		name     string
		err      error
		wantLine int
	}{
		{"setting", keyedErr{"rungs", "the asha scheduler has no setting \"rungs\""}, 9},
		{"type", keyedErr{"type", "unknown scheduler \"asha\""}, 7},
		{"block", errors.New("needs more"), 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gotKind, gotMetric, gotSettings string
			_, diags := Parse([]byte(src), "train.hcl", ParseOptions{CheckScheduler: func(kind, metric string, settings []byte) error {
				gotKind, gotMetric, gotSettings = kind, metric, string(settings)
				return tc.err
			}})
			must.EqOp(t, "asha", gotKind)
			must.EqOp(t, "loss", gotMetric)
			must.EqOp(t, `{"max_t":9,"rungs":3}`, gotSettings)
			must.SliceLen(t, 1, diags.Errs(), must.Sprint(diags.Error()))
			d := diags.Errs()[0].(*hcl.Diagnostic)
			must.EqOp(t, "Invalid scheduler setting", d.Summary)
			must.EqOp(t, tc.wantLine, d.Subject.Start.Line)
			must.StrContains(t, d.Detail, strings.ToUpper(tc.err.Error()[:1]))
		})
	}
	_, diags := Parse([]byte(src), "train.hcl", ParseOptions{CheckScheduler: func(string, string, []byte) error { return nil }})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
}

// A trial compiles into a job of its own: the experiment's name and the
// trial's in its ID, the trial's run name, storage directory and config in
// the driver's config, the spec's failure block as its policies, and a
// service name Nomad accepts. The spec itself is left as it was.
func TestCompileTrial(t *testing.T) {
	src := strings.Replace(tuneSpec, "  tune {", "  run {\n    storage_path = \"/mnt/shared/results\"\n    failure { max_failures = 2 }\n  }\n  tune {", 1)
	spec, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	before := spec.SHA256()

	job, diags := CompileTrial(spec, "trial_0003", "/mnt/shared/results/qs-tune", []byte(`{"lr":0.01}`))
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	must.EqOp(t, "qs-tune-trial_0003", *job.ID)
	must.EqOp(t, "qs-tune-trial_0003", *job.Name)
	must.EqOp(t, "trial_0003", job.Meta[MetaRun])
	must.EqOp(t, "qs-tune", job.Meta[MetaExperiment])
	must.EqOp(t, "/mnt/shared/results/qs-tune", job.Meta[MetaStoragePath])
	g := job.TaskGroups[0]
	must.EqOp(t, "qs-tune-trial-0003-worker", g.Services[0].Name)
	must.EqOp(t, 2, *g.RestartPolicy.Attempts)
	must.EqOp(t, 2, *g.ReschedulePolicy.Attempts)
	cfg := g.Tasks[0].Config
	must.EqOp(t, "trial_0003", cfg["run_name"].(string))
	must.EqOp(t, "/mnt/shared/results/qs-tune", cfg["storage_path"].(string))
	must.EqOp(t, `{"lr":0.01}`, cfg["train_config"].(string))
	must.EqOp(t, 2, cfg["failure"].([]map[string]any)[0]["max_failures"].(int))

	must.EqOp(t, before, spec.SHA256())
	other, _ := CompileTrial(spec, "trial_0003", "/mnt/shared/results/qs-tune", []byte(`{"lr":0.02}`))
	must.NotEq(t, job.Meta[MetaSpecSHA256], other.Meta[MetaSpecSHA256]) // a changed config is a changed job
}

// A wrong stop criterion is reported at its key, saying what is wrong and
// what the two forms are; the others are still read.
func TestTuneStopErrors(t *testing.T) {
	src := `train "x" {
  entrypoint { builtin = "quickstart" }
  tune {
    stop = {
      training_iteration = 20
      loss     = { below = 0.05 }
      acc      = { at_least = 0.9, at_most = 1 }
      val_loss = { at_most = "low" }
      epochs   = [3]
    }
  }
}
`
	_, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
	var got []string
	for _, d := range diags {
		got = append(got, d.Subject.String()+": "+d.Summary+"; "+d.Detail)
	}
	const forms = ": give a number (the trial stops once %s is at least it) or { at_most = <number> } (once it is at most it), " +
		"as in stop = { training_iteration = 20, loss = { at_most = 0.05 } }."
	f := func(name string) string { return strings.ReplaceAll(forms, "%s", name) }
	must.Eq(t, []string{
		`train.hcl:7,7-10: Invalid stop criterion; The criterion "acc" holds more than one bound` + f("acc"),
		`train.hcl:9,7-13: Invalid stop criterion; The criterion "epochs" is a tuple` + f("epochs"),
		`train.hcl:6,7-11: Invalid stop criterion; The criterion "loss" holds "below", which is neither at_least nor at_most` + f("loss"),
		`train.hcl:8,7-15: Invalid stop criterion; The criterion "val_loss" has at_most, which is not a number` + f("val_loss"),
	}, got)
}

// stop_on_plateau takes Ray's TrialPlateauStopper defaults and the tune
// block's metric unless it says otherwise; wrong settings are reported
// where they are.
func TestTunePlateauBlock(t *testing.T) {
	parse := func(tune string) (*Spec, hcl.Diagnostics) {
		return Parse([]byte("train \"x\" {\nentrypoint { builtin = \"quickstart\" }\ntune {\n"+tune+"\n}\n}\n"), "train.hcl", ParseOptions{})
	}
	spec, diags := parse("metric = \"loss\"\nmode = \"min\"\nstop_on_plateau {}")
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	must.Eq(t, &TunePlateau{Metric: "loss", Std: 0.01, NumResults: 4, GracePeriod: 4}, spec.Tune.Plateau)
	spec, diags = parse("stop_on_plateau {\nmetric = \"val_loss\"\nstd = 0.001\nnum_results = 8\ngrace_period = 0\n}")
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	must.Eq(t, &TunePlateau{Metric: "val_loss", Std: 0.001, NumResults: 8, GracePeriod: 0}, spec.Tune.Plateau)

	for _, tc := range []struct{ body, want string }{
		{"stop_on_plateau {}", "train.hcl:4,1-16: Missing metric; stop_on_plateau watches a metric: set metric here, or metric and mode in the tune block."},
		{"stop_on_plateau {\nmetric = \"loss\"\nstd = 0\n}", "train.hcl:6,7-8: Invalid value; std must be a positive number, " +
			"the spread under which a trial's last num_results values count as a plateau; got 0."},
		{"stop_on_plateau {\nmetric = \"loss\"\nnum_results = 1\n}", "train.hcl:6,15-16: Invalid value; num_results must be between 2 and 100000; got 1."},
	} {
		_, diags := parse(tc.body)
		must.True(t, diags.HasErrors())
		d := diags.Errs()[0].(*hcl.Diagnostic)
		must.EqOp(t, tc.want, d.Subject.String()+": "+d.Summary+"; "+d.Detail)
	}
}

// A search-space function's arguments that the tuner could not sample are
// reported at the argument at fault: integer bounds beyond 2^53, a range
// wider than the largest float, quniform bounds that are not multiples of
// the step (as Ray refuses them), and a step with no multiple within the
// bounds.
func TestTuneFunctionArgs(t *testing.T) {
	for _, tc := range []struct{ fn, arg, detail string }{
		{"randint(0, 1e19)", "1e19", "randint: integer bounds and steps must lie within ±9007199254740992 (2^53); got 1e+19."},
		{"randint(-9e18, 9e18)", "-", // hcl's range of a negative literal is its sign
			"randint: integer bounds and steps must lie within ±9007199254740992 (2^53); got -9e+18."},
		{"lograndint(1, 1e300)", "1e300", "lograndint: integer bounds and steps must lie within ±9007199254740992 (2^53); got 1e+300."},
		{"qrandint(0, 1e19, 1)", "1e19", "qrandint: integer bounds and steps must lie within ±9007199254740992 (2^53); got 1e+19."},
		{"qlograndint(1, 1e300, 1)", "1e300", "qlograndint: integer bounds and steps must lie within ±9007199254740992 (2^53); got 1e+300."},
		{"qlograndint(1, 10, 2.5)", "2.5", "qlograndint: the bounds and the step must be whole numbers; got 2.5."},
		{"uniform(-1e308, 1e308)", "1e308", "uniform: the range from -1e+308 to 1e+308 is wider than the largest float; narrow it."},
		{"uniform(0, 1e300 * 1e300)", "1e300", // hcl points at the expression's start
			"uniform: the argument must be a finite number."},
		{"quniform(0.1, 1, 0.3)", "0.1", "quniform: the bound 0.1 is not a multiple of the step 0.3."},
		{"quniform(0, 1, 0.3)", "1", "quniform: the bound 1 is not a multiple of the step 0.3."},
		{"qrandint(1, 2, 5)", "5", "qrandint: no multiple of the step 5 lies from 1 to 2."},
		{"qloguniform(3, 4, 5)", "5", "qloguniform: no multiple of the step 5 lies from 3 to 4."},
	} {
		t.Run(tc.fn, func(t *testing.T) {
			src := "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\nconfig = { a = " + tc.fn + " }\ntune {}\n}\n"
			_, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
			must.SliceLen(t, 1, diags, must.Sprint(diags.Error()))
			d := diags[0]
			must.EqOp(t, "Invalid function argument", d.Summary)
			must.EqOp(t, 3, d.Subject.Start.Line)
			must.EqOp(t, tc.arg, string(d.Subject.SliceBytes([]byte(src))))
			must.StrContains(t, d.Detail, tc.detail)
		})
	}
	for _, good := range []string{"randint(-9007199254740992, 9007199254740992)", "uniform(-1e307, 1e307)",
		"quniform(0.3, 0.9, 0.3)", "quniform(10, 100, 10)", "qlograndint(16, 512, 16)"} {
		_, diags := Parse([]byte("train \"x\" {\nentrypoint { builtin = \"quickstart\" }\nconfig = { a = "+good+" }\ntune {}\n}\n"), "train.hcl", ParseOptions{})
		must.False(t, diags.HasErrors(), must.Sprint(good, diags.Error()))
	}
}

// An error elsewhere in the spec hides none of the checks that do not
// depend on it: the pairing of metric and mode, and the builtin's config
// check; a check that does depend on a wrong value is skipped.
func TestTuneChecksBesideOtherErrors(t *testing.T) {
	unknownX := func(string, []byte, int, int) error { return errors.New(`json: unknown field "x"`) }
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"metric without mode beside bad samples", "tune {\nnum_samples = 0\nmetric = \"loss\"\n}", []string{
			"train.hcl:4,15-16: Invalid value", "train.hcl:3,1-5: Metric and mode go together"}},
		{"a wrong mode is not a missing one", "tune {\nmetric = \"loss\"\nmode = \"up\"\n}", []string{
			"train.hcl:5,8-12: Invalid value"}},
		{"builtin config beside a bad priority", "priority = 0\nconfig = { x = 1 }", []string{
			"train.hcl:3,12-13: Invalid value", "train.hcl:4,12-13: Config the builtin cannot use"}},
		{"no builtin check of a search space without tune", "config = { x = uniform(0, 1) }", []string{
			"train.hcl:3,10-31: Search space without a tune block"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\n" + tc.body + "\n}\n"
			_, diags := Parse([]byte(src), "train.hcl", ParseOptions{CheckConfig: unknownX})
			var got []string
			for _, d := range diags {
				got = append(got, d.Subject.String()+": "+d.Summary)
			}
			must.Eq(t, tc.want, got)
		})
	}
}

// An experiment's config is checked against its builtin as a plain run's
// is, with a sample in place of each search-space function: a key the
// builtin does not know would fail every trial.
func TestTuneConfigCheckedAgainstBuiltin(t *testing.T) {
	check := func(_ string, config []byte, _, _ int) error {
		dec := json.NewDecoder(bytes.NewReader(config))
		dec.DisallowUnknownFields()
		var c struct {
			LR     float64 `json:"lr"`
			Epochs int     `json:"epochs"`
			Opt    struct {
				Name string  `json:"name"`
				Beta float64 `json:"beta"`
			} `json:"opt"`
		}
		return dec.Decode(&c)
	}
	for _, tc := range []struct{ name, config, want string }{
		{"known keys", "lr = loguniform(1e-4, 1e-1)\nepochs = choice([2, 4])\nopt = choice([{ name = \"adam\", beta = uniform(0.8, 0.99) }, { name = \"sgd\" }])", ""},
		{"grid and randint", "lr = grid_search([0.1, 0.01])\nepochs = randint(1, 10)", ""},
		{"unknown key", "lr = 0.1\nx = quniform(0.1, 1, 0.1)",
			`train.hcl:5,1-2: Config the builtin cannot use; The quickstart builtin's workers would fail on this config in every trial: json: unknown field "x".`},
		{"a sample of the wrong type", "epochs = uniform(0.5, 2)",
			`train.hcl:3,10-5,2: Config the builtin cannot use; The quickstart builtin's workers would fail on this config in every trial: json: cannot unmarshal number 0.5 into Go struct field .epochs of type int.`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\nconfig = {\n" + tc.config + "\n}\ntune {}\n}\n"
			_, diags := Parse([]byte(src), "train.hcl", ParseOptions{CheckConfig: check})
			if tc.want == "" {
				must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
				return
			}
			must.SliceLen(t, 1, diags, must.Sprint(diags.Error()))
			must.EqOp(t, tc.want, diags[0].Subject.String()+": "+diags[0].Summary+"; "+diags[0].Detail)
		})
	}
}
