package tune

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// SchedulerSettings is one kind of trial scheduler with its settings, as a
// Go program or train.hcl's scheduler block gives them. Each kind owns its
// settings type, their defaults and their validation; the tuner builds a
// fresh scheduler from the settings for every Fit and replays the recorded
// results into it.
type SchedulerSettings interface {
	// Kind is the scheduler's name, train.hcl's scheduler { type = "..." }.
	Kind() string
	// Build checks the settings and returns the scheduler for objective o;
	// seed makes its random choices reproducible.
	Build(o Objective, seed uint64) (Scheduler, error)
}

// schedulerKind is a registered kind of scheduler.
type schedulerKind struct {
	// settings returns a pointer to a fresh, zero settings value, which
	// JSON decodes into (keys as in train.hcl) and which is a
	// SchedulerSettings.
	settings func() SchedulerSettings
	// ranks says the scheduler compares trials, so it needs a metric.
	ranks bool
}

// schedulers maps each kind's name to it. Each scheduler's own file adds
// itself in an init function; nothing else lists the kinds.
var schedulers = map[string]schedulerKind{}

// registerScheduler adds a kind; settings returns a pointer to its zero
// settings.
func registerScheduler(name string, ranks bool, settings func() SchedulerSettings) {
	if _, dup := schedulers[name]; dup {
		panic("tune: scheduler " + name + " registered twice")
	}
	schedulers[name] = schedulerKind{settings: settings, ranks: ranks}
}

// SchedulerKinds lists the registered scheduler names, sorted.
func SchedulerKinds() []string {
	names := make([]string, 0, len(schedulers))
	for n := range schedulers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// SettingError is a problem with one scheduler setting. Key names the
// setting ("max_t"), or is "" for the scheduler block as a whole, so that a
// spec reader can point at it.
type SettingError struct {
	Key string
	Err error
}

func (e *SettingError) Error() string {
	if e.Key == "" {
		return e.Err.Error()
	}
	return e.Key + ": " + e.Err.Error()
}

func (e *SettingError) Unwrap() error { return e.Err }

// SettingKey names the setting at fault (for readers that cannot import
// this package, through an interface).
func (e *SettingError) SettingKey() string { return e.Key }

func settingErrorf(key, format string, args ...any) error {
	return &SettingError{Key: key, Err: fmt.Errorf(format, args...)}
}

// ParseScheduler decodes the settings of the scheduler kind from a JSON
// object whose keys are the settings' names in train.hcl ("max_t"), and
// checks them against the objective's metric. Errors about one setting are
// *SettingError values naming it; an unknown kind is one naming "type".
func ParseScheduler(kind string, settings []byte, metric string) (SchedulerSettings, error) {
	k, ok := schedulers[kind]
	if !ok {
		return nil, settingErrorf("type", "unknown scheduler %q; the schedulers are %s", kind, strings.Join(SchedulerKinds(), ", "))
	}
	s := k.settings()
	var noMetric string
	if k.ranks && metric == "" {
		noMetric = fmt.Sprintf("the %s scheduler ranks trials: set metric and mode in the tune block", kind)
	}
	if err := decodeSettings(kind, "scheduler", s, settings, noMetric); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeSettings decodes the JSON object settings into s, a pointer to
// the settings of kind, a scheduler's or a searcher's (what), and checks
// them (their validate method, and noMetric: a problem of the block as a
// whole, when not ""). Every key that s has no setting for is a problem,
// reported together; once the keys are known, every problem of the
// values is, with noMetric.
func decodeSettings(kind, what string, s any, settings []byte, noMetric string) error {
	var p problems
	if len(bytes.TrimSpace(settings)) > 0 {
		if err := decodeKnown(kind, what, s, settings); err != nil {
			return err
		}
	}
	if noMetric != "" {
		p.addf("", "%s", noMetric)
	}
	if v, ok := s.(interface{ validate(givenKeys) error }); ok {
		p = append(p, v.validate(keysOf(settings)))
	}
	return p.err()
}

// decodeKnown decodes settings into s after checking that s has each of
// its keys.
func decodeKnown(kind, what string, s any, settings []byte) error {
	var p problems
	names := settingNames(s)
	for _, key := range slices.Sorted(maps.Keys(keysOf(settings))) {
		switch {
		case slices.Contains(names, key):
		case len(names) == 0:
			p.addf(key, "the %s %s takes no settings", kind, what)
		default:
			p.addf(key, "the %s %s has no setting %q; it takes %s", kind, what, key, strings.Join(names, ", "))
		}
	}
	if err := p.err(); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(settings))
	dec.DisallowUnknownFields()
	if err := dec.Decode(s); err != nil {
		return settingDecodeError(kind, what, s, err)
	}
	return nil
}

// settingDecodeError turns a JSON decoding error into one that names the
// setting.
func settingDecodeError(kind, what string, s any, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return settingErrorf(te.Field, "must be %s, got a JSON %s", te.Type, te.Value)
	}
	return settingErrorf("", "%s %s settings: %v", kind, what, err)
}

// settingNames lists the JSON names of a settings struct's fields.
func settingNames(s any) []string {
	t := reflect.TypeOf(s)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// problems collects every problem of a settings value, each a
// *SettingError, so that a spec reader reports them all at once.
type problems []error

// addf adds a problem with the setting key.
func (p *problems) addf(key, format string, args ...any) {
	*p = append(*p, settingErrorf(key, format, args...))
}

// err joins the problems (errors.Join), or is nil.
func (p problems) err() error { return errors.Join(p...) }

// givenKeys are the settings a JSON object named, where a zero value is
// the setting written as 0 rather than left to its default. Settings built
// in Go give none.
type givenKeys map[string]bool

// keysOf lists the keys of the JSON object settings.
func keysOf(settings []byte) givenKeys {
	var m map[string]json.RawMessage
	if json.Unmarshal(settings, &m) != nil {
		return nil
	}
	given := givenKeys{}
	for k := range m {
		given[k] = true
	}
	return given
}

// positive checks that each named value, when set (not zero, or written
// as 0), is a positive finite number.
func (p *problems) positive(given givenKeys, vals ...namedFloat) {
	for _, v := range vals {
		if (v.val != 0 || given[v.name]) && !(v.val > 0 && v.val < 1e308) {
			p.addf(v.name, "must be a positive number; got %v", v.val)
		}
	}
}

type namedFloat struct {
	name string
	val  float64
}

// nonNegative checks that each named count is not negative.
func (p *problems) nonNegative(vals ...namedInt) {
	for _, v := range vals {
		if v.val < 0 {
			p.addf(v.name, "must not be negative; got %d", v.val)
		}
	}
}

type namedInt struct {
	name string
	val  int
}
