package trainspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/nomad/api"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// Tune is the tune {} block: hyperparameter tuning of the train block's
// config (run with `nomad-train tune train.hcl`). The search space is the
// config itself, with search-space functions (see TuneFunctions) in place
// of values; they reach ConfigJSON in their JSON form, {"loguniform":
// [0.0001, 0.1]}, which package scheduler/tune reads.
type Tune struct {
	NumSamples          int // or UnlimitedSamples
	MaxConcurrentTrials int
	Metric              string `json:",omitempty"`
	Mode                string `json:",omitempty"` // "min" or "max"
	TimeAttr            string `json:",omitempty"`
	TimeBudget          time.Duration
	Searcher            string // "random" (default) or "grid"
	Seed                int
	MaxFailures         int  // per trial; -1 unlimited
	FailFast            bool `json:",omitempty"`
	Scheduler           TuneScheduler
	// SearchAlg is the search_alg: a searcher's type and settings; its
	// Type is Searcher when the tune block names none.
	SearchAlg TuneSearcher
	// Stop is the stop = {...} map: a trial ends at its first report that
	// meets any of its criteria. Sorted by metric.
	Stop []TuneStop `json:",omitempty"`
	// Plateau is the stop_on_plateau {} block, or nil.
	Plateau *TunePlateau `json:",omitempty"`
}

// TunePlateau is the tune block's stop_on_plateau {} block (Ray's
// TrialPlateauStopper): a trial stops once the standard deviation of its
// last NumResults values of Metric is below Std, from its GracePeriod-th
// report on. Metric is the tune block's metric unless the block names one.
type TunePlateau struct {
	Metric      string
	Std         float64
	NumResults  int
	GracePeriod int
}

// TuneStop is one criterion of the tune block's stop map: a trial stops
// once Metric is at least Value (a bare number, as in Ray's stop dict),
// or at most Value ({ at_most = 0.05 }, for a loss). training_iteration
// is the report's step.
type TuneStop struct {
	Metric string
	Value  float64
	AtMost bool `json:",omitempty"`
}

// TuneScheduler is the tune block's scheduler {} block: the scheduler's
// type and its settings. The scheduler owns its settings: this package hands
// them over as JSON and reports what ParseOptions.CheckScheduler finds wrong
// at the setting's place in the file.
type TuneScheduler struct {
	Type string // "fifo" when the block is absent
	// SettingsJSON is the block's other attributes as one JSON object
	// (search-space functions in their JSON form), or nil.
	SettingsJSON []byte `json:",omitempty"`
}

// tune decodes a tune block.
func (d *decoder) tune(b *hcl.Block) *Tune {
	t := &Tune{NumSamples: 1, MaxConcurrentTrials: 1, Searcher: "random"}
	c := d.content(b.Body, tuneSchema)
	a := c.Attributes
	d.numSamples(a["num_samples"], &t.NumSamples)
	d.integer(a["max_concurrent_trials"], &t.MaxConcurrentTrials, 1, 10000)
	// A metric or mode that is wrong was reported; what depends on them
	// (their pairing, the plugins' checks) is not checked against a guess.
	metricOK := a["metric"] == nil || d.nonEmpty(a["metric"], &t.Metric)
	modeOK := a["mode"] == nil || d.enum(a["mode"], &t.Mode, "min", "max")
	d.nonEmpty(a["time_attr"], &t.TimeAttr)
	d.enum(a["searcher"], &t.Searcher, "random", "grid")
	d.integer(a["seed"], &t.Seed, 0, math.MaxInt32)
	d.integer(a["max_failures"], &t.MaxFailures, -1, math.MaxInt32)
	d.boolean(a["fail_fast"], &t.FailFast)
	if attr := a["time_budget"]; attr != nil {
		var s string
		if d.str(attr, &s) {
			if dur, err := time.ParseDuration(s); err != nil || dur <= 0 {
				d.errorf(attr, "Invalid duration", "time_budget must be a positive duration such as \"30m\" or \"2h\"; got %q.", s)
			} else {
				t.TimeBudget = dur
			}
		}
	}
	if t.NumSamples == UnlimitedSamples && a["time_budget"] == nil {
		d.errorf(a["num_samples"], "Missing time_budget",
			"num_samples = -1 samples trials until the time budget is spent: set time_budget as well, such as time_budget = \"2h\".")
	}
	if (t.Metric == "") != (t.Mode == "") && metricOK && modeOK {
		d.rangeErrorf(b.DefRange, "Metric and mode go together", "Set both metric and mode (\"min\" or \"max\"), or neither.")
	}
	t.Scheduler = TuneScheduler{Type: "fifo"}
	if sb := d.single(c, "scheduler"); sb != nil {
		t.Scheduler = d.tuneScheduler(sb, t.Metric, metricOK)
	}
	t.SearchAlg = d.tuneSearchAlg(c, t.Metric, metricOK, a["searcher"], &t.Searcher)
	t.Stop = d.tuneStop(a["stop"])
	if pb := d.single(c, "stop_on_plateau"); pb != nil {
		t.Plateau = d.tunePlateau(pb, t.Metric)
	}
	return t
}

// UnlimitedSamples is num_samples = -1: trials are sampled until the
// time budget is spent (Ray's num_samples=-1), which the block must set.
const UnlimitedSamples = -1

// numSamples decodes num_samples: 1 to 100,000, or UnlimitedSamples.
func (d *decoder) numSamples(attr *hcl.Attribute, dst *int) {
	v, ok := d.value(attr, cty.Number)
	if !ok {
		return
	}
	n, acc := v.AsBigFloat().Int64()
	if acc != big.Exact || n != UnlimitedSamples && (n < 1 || n > 100000) {
		d.errorf(attr, "Invalid value", "num_samples must be a whole number from 1 to 100000, or -1 to sample trials until the time budget is spent; got %s.",
			v.AsBigFloat().Text('g', 10))
		return
	}
	*dst = int(n)
}

// tunePlateau decodes a stop_on_plateau block, with Ray's defaults: std
// 0.01, num_results 4, grace_period 4.
func (d *decoder) tunePlateau(b *hcl.Block, metric string) *TunePlateau {
	p := &TunePlateau{Metric: metric, Std: 0.01, NumResults: 4, GracePeriod: 4}
	a := d.content(b.Body, plateauSchema).Attributes
	d.nonEmpty(a["metric"], &p.Metric)
	d.integer(a["num_results"], &p.NumResults, 2, 100000)
	d.integer(a["grace_period"], &p.GracePeriod, 0, math.MaxInt32)
	if attr := a["std"]; attr != nil {
		if v, ok := d.value(attr, cty.Number); ok {
			if f, _ := v.AsBigFloat().Float64(); f > 0 && !math.IsInf(f, 0) {
				p.Std = f
			} else {
				d.errorf(attr, "Invalid value", "std must be a positive number, the spread under which a trial's last num_results values count as a plateau; got %s.",
					v.AsBigFloat().Text('g', 10))
			}
		}
	}
	if p.Metric == "" {
		d.rangeErrorf(b.DefRange, "Missing metric", "stop_on_plateau watches a metric: set metric here, or metric and mode in the tune block.")
	}
	return p
}

// stopExample shows the stop map's two forms.
const stopExample = "stop = { training_iteration = 20, loss = { at_most = 0.05 } }"

// tuneStop decodes the stop map: metric names to a number (at least) or
// to { at_least = n } or { at_most = n }.
func (d *decoder) tuneStop(attr *hcl.Attribute) []TuneStop {
	if attr == nil {
		return nil
	}
	val, diags := attr.Expr.Value(d.ctx)
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() || val.IsNull() || !val.IsWhollyKnown() {
		return nil
	}
	if ty := val.Type(); !ty.IsObjectType() && !ty.IsMapType() {
		d.errorf(attr, "Invalid stop", "stop maps a reported metric to where a trial stops, such as %s; got %s.",
			stopExample, val.Type().FriendlyName())
		return nil
	}
	var out []TuneStop
	for it := val.ElementIterator(); it.Next(); {
		k, v := it.Element()
		name := k.AsString()
		c := TuneStop{Metric: name}
		var why string
		switch {
		case strings.TrimSpace(name) == "":
			why = "has no metric name"
		case v.IsNull():
			why = "is null"
		case v.Type() == cty.Number:
			c.Value, _ = v.AsBigFloat().Float64()
		case v.Type().IsObjectType() || v.Type().IsMapType():
			c, why = stopBound(name, v)
		default:
			why = "is a " + v.Type().FriendlyName()
		}
		if why != "" {
			d.keyErrorf(attr, name, "Invalid stop criterion", "The criterion %q %s: give a number (the trial stops once "+
				"%s is at least it) or { at_most = <number> } (once it is at most it), as in %s.", name, why, name, stopExample)
			continue
		}
		out = append(out, c)
	}
	return out
}

// stopBound reads a stop criterion written { at_least = n } or
// { at_most = n }; why says what is wrong, or is empty.
func stopBound(name string, v cty.Value) (c TuneStop, why string) {
	c.Metric = name
	switch v.LengthInt() {
	case 0:
		return c, "is empty"
	case 1:
	default:
		return c, "holds more than one bound"
	}
	it := v.ElementIterator()
	it.Next()
	k, n := it.Element()
	switch k.AsString() {
	case "at_least":
	case "at_most":
		c.AtMost = true
	default:
		return c, fmt.Sprintf("holds %q, which is neither at_least nor at_most", k.AsString())
	}
	if n.IsNull() || n.Type() != cty.Number {
		return c, fmt.Sprintf("has %s, which is not a number", k.AsString())
	}
	c.Value, _ = n.AsBigFloat().Float64()
	return c, ""
}

// tuneScheduler decodes a scheduler block: its type, and its other
// attributes as the JSON object of the scheduler's settings, which the
// scheduler checks (ParseOptions.CheckScheduler) unless the tune block's
// metric is wrong (metricOK false): the check depends on it.
func (d *decoder) tuneScheduler(b *hcl.Block, metric string, metricOK bool) TuneScheduler {
	var check func(kind string, settings []byte) error
	if d.checkScheduler != nil && metricOK {
		check = func(kind string, settings []byte) error { return d.checkScheduler(kind, metric, settings) }
	}
	typ, settings := d.typedBlock(b, "scheduler", `type = "asha"`, check)
	return TuneScheduler{Type: typ, SettingsJSON: settings}
}

// typedBlock decodes a block of a plugin kind (scheduler, search_alg): its
// type, and its other attributes as one JSON object of the kind's
// settings, which check (when set) checks unless a setting's value is
// wrong itself. Each problem the check finds (several are joined, as
// errors.Join does) is reported, one that names a setting (SettingKey) at
// it.
func (d *decoder) typedBlock(b *hcl.Block, what, example string, check func(kind string, settings []byte) error) (typ string, settingsJSON []byte) {
	attrs, diags := b.Body.JustAttributes()
	d.diags = append(d.diags, diags...)
	typAttr := attrs["type"]
	if typAttr == nil {
		d.rangeErrorf(b.DefRange, "Missing required argument", "The %s block needs type, such as %s.", what, example)
		return "", nil
	}
	if !d.nonEmpty(typAttr, &typ) {
		return "", nil
	}
	settings := map[string]json.RawMessage{}
	valuesOK := true
	for name, attr := range attrs {
		if name == "type" {
			continue
		}
		js, ok := d.jsonValue(attr)
		if ok {
			settings[name] = js
		}
		valuesOK = valuesOK && ok
	}
	if len(settings) > 0 {
		settingsJSON, _ = json.Marshal(settings) // sorted keys
	}
	if check == nil || !valuesOK {
		return typ, settingsJSON
	}
	for _, err := range splitJoined(check(typ, settingsJSON)) {
		var keyed interface{ SettingKey() string }
		rng := b.DefRange
		if errors.As(err, &keyed) {
			if attr := attrs[keyed.SettingKey()]; attr != nil {
				rng = attr.Range
				if keyed.SettingKey() == "type" {
					rng = attr.Expr.Range()
				}
				// The snippet shows the setting: say only what is wrong.
				if inner := errors.Unwrap(err); inner != nil {
					err = inner
				}
			}
		}
		d.rangeErrorf(rng, "Invalid "+what+" setting", "%s.", capitalize(err.Error()))
	}
	return typ, settingsJSON
}

// splitJoined lists the errors that err joins (errors.Join, at any
// depth), or err alone; none for nil.
func splitJoined(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		if err == nil {
			return nil
		}
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, splitJoined(e)...)
	}
	return out
}

// jsonValue evaluates attr and writes its value as JSON.
func (d *decoder) jsonValue(attr *hcl.Attribute) ([]byte, bool) {
	val, diags := attr.Expr.Value(d.ctx)
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() || val.IsNull() || !val.IsWhollyKnown() {
		return nil, false
	}
	js, err := ctyjson.Marshal(val, val.Type())
	if err != nil {
		d.errorf(attr, "Invalid value", "%s cannot be written as JSON: %s.", attr.Name, err)
		return nil, false
	}
	return js, true
}

// capitalize upper-cases the first letter of an error message, for a
// diagnostic's detail.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// MetaExperiment is the job meta key naming the tune experiment a trial's
// job belongs to (set by CompileTrial).
const MetaExperiment = ReservedMetaPrefix + "experiment"

// MetaTuner marks the job of a detached experiment's tuner (tune
// -detach): its value is the experiment's name.
const MetaTuner = ReservedMetaPrefix + "tuner"

// TrialJobID is the Nomad job ID of one trial of a tune experiment: the
// experiment's name and the trial's run name ("qs-tune-trial_0003").
func TrialJobID(experiment, trial string) string { return experiment + "-" + trial }

// CompileTrial compiles one trial of the tune experiment s into its own
// Nomad job: the train spec with the trial's run name, storage directory
// and config. The trial's workers report into storageDir/trial, as a local
// trial's do; the job's ID is TrialJobID(s.Name, trial); its restart and
// reschedule policies are the spec's failure block, as for `nomad-train
// run`, so each trial has the spec's failure budget of its own. The spec
// is not changed.
// OneRun returns an error diagnostic when s is an experiment (it has a
// tune block), for the commands that train its config once: the config
// is a search space, which only a tuner samples.
func OneRun(s *Spec, command string) hcl.Diagnostics {
	if s.Tune == nil {
		return nil
	}
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Spec with a tune block",
		Detail: fmt.Sprintf("This spec is an experiment: its config is a search space, which `nomad-train tune` samples into trials; %s trains one config. Run `nomad-train tune %s`, or drop the tune block and give plain values.",
			command, s.ranges.tune.Filename),
		Subject: s.ranges.rangeOr(s.ranges.tune),
	}}
}

func CompileTrial(s *Spec, trial, storageDir string, config []byte) (*api.Job, hcl.Diagnostics) {
	t := *s
	t.Name, t.ConfigJSON, t.Tune = trial, config, nil
	t.Run.StoragePath = storageDir
	if t.Run.IsS3() {
		// Every trial reads the experiment's S3 keys: one Variable to put,
		// not one per trial job. A trial job's workload identity reads it
		// through an ACL policy (it is not the job's own path).
		st := Storage{}
		if t.Run.Storage != nil {
			st = *t.Run.Storage
		}
		if st.CredentialsVariable == "" {
			st.CredentialsVariable = S3CredentialsVariablePath(s.Name)
		}
		t.Run.Storage = &st
	}
	job, diags := Compile(&t)
	id := TrialJobID(s.Name, trial)
	job.ID, job.Name = &id, &id
	job.Meta[MetaExperiment] = s.Name
	for _, g := range job.TaskGroups {
		for _, sv := range g.Services {
			sv.Name = trialServiceName(s.Name, trial)
			if sv.PortLabel == MetricsPortLabel {
				sv.Name = trialService(s.Name, trial, metricsServiceSuffix)
			}
		}
	}
	return job, diags
}

// maxLabel is the longest service name Nomad takes (an RFC 1123 label).
const maxLabel = 63

// serviceLabel makes a run or trial name, which may hold underscores (a
// Nomad job ID may), fit a service name: a DNS label has none.
func serviceLabel(name string) string { return strings.ReplaceAll(name, "_", "-") }

// trialServiceName is the trial's worker service: a DNS label (Nomad takes
// RFC 1123, at most 63 characters), so the trial's underscore becomes a dash
// and a long experiment name is cut to fit, keeping the trial's own part.
func trialServiceName(experiment, trial string) string {
	return trialService(experiment, trial, "-worker")
}

// trialService is trialServiceName with another suffix than "-worker".
func trialService(experiment, trial, suffix string) string {
	experiment, tail := serviceLabel(experiment), "-"+serviceLabel(trial)+suffix
	if room := maxLabel - len(tail); len(experiment) > room {
		experiment = strings.TrimRight(experiment[:max(room, 1)], "-")
	}
	return experiment + tail
}
