package tune

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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
	if len(bytes.TrimSpace(settings)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(settings))
		dec.DisallowUnknownFields()
		if err := dec.Decode(s); err != nil {
			return nil, settingDecodeError(kind, s, err)
		}
	}
	if k.ranks && metric == "" {
		return nil, settingErrorf("", "the %s scheduler ranks trials: set metric and mode in the tune block", kind)
	}
	if v, ok := s.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// settingDecodeError turns a JSON decoding error into one that names the
// setting and, for an unknown one, the settings the kind takes.
func settingDecodeError(kind string, s any, err error) error {
	if _, key, found := strings.Cut(err.Error(), `unknown field "`); found {
		key, _, _ = strings.Cut(key, `"`)
		names := settingNames(s)
		if len(names) == 0 {
			return settingErrorf(key, "the %s scheduler takes no settings", kind)
		}
		return settingErrorf(key, "the %s scheduler has no setting %q; it takes %s", kind, key, strings.Join(names, ", "))
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return settingErrorf(te.Field, "must be %s, got a JSON %s", te.Type, te.Value)
	}
	return settingErrorf("", "%s scheduler settings: %v", kind, err)
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

// positiveSettings checks that each named value, when set, is a positive
// finite number.
func positiveSettings(vals ...namedFloat) error {
	for _, v := range vals {
		if v.val != 0 && !(v.val > 0 && v.val < 1e308) {
			return settingErrorf(v.name, "must be a positive number; got %v", v.val)
		}
	}
	return nil
}

type namedFloat struct {
	name string
	val  float64
}
