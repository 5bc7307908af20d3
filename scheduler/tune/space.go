package tune

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// Domain is a search-space function: a value of the param space that the
// searcher replaces with a concrete value in each trial's config.
type Domain interface {
	// Sample draws one value.
	Sample(r *rand.Rand) any
	// Kind names the function: "uniform", "quniform", "loguniform",
	// "randint", "choice" or "grid_search".
	Kind() string
	// MarshalJSON writes the function in its JSON form, {"kind": [args]}.
	MarshalJSON() ([]byte, error)
}

// Uniform samples a float uniformly from [lo, hi).
func Uniform(lo, hi float64) Domain { return uniform{lo, hi} }

// QUniform samples uniformly from [lo, hi] and rounds to a multiple of q.
func QUniform(lo, hi, q float64) Domain { return quniform{lo, hi, q} }

// LogUniform samples a float whose logarithm is uniform on [log lo, log hi).
func LogUniform(lo, hi float64) Domain { return loguniform{lo, hi} }

// RandInt samples an integer uniformly from [lo, hi) (hi excluded, as in Ray).
func RandInt(lo, hi int) Domain { return randint{lo, hi} }

// Choice samples one of values uniformly.
func Choice(values ...any) Domain { return choice(values) }

// GridSearch is not sampled: the searcher makes one variant per value, for
// every combination of the space's grid searches.
func GridSearch(values ...any) Domain { return grid(values) }

type uniform struct{ lo, hi float64 }

func (d uniform) Sample(r *rand.Rand) any      { return d.lo + r.Float64()*(d.hi-d.lo) }
func (uniform) Kind() string                   { return "uniform" }
func (d uniform) MarshalJSON() ([]byte, error) { return kindJSON(d.Kind(), d.lo, d.hi) }

type quniform struct{ lo, hi, q float64 }

func (d quniform) Sample(r *rand.Rand) any {
	return quantize(d.lo+r.Float64()*(d.hi-d.lo), d.q, d.lo, d.hi)
}
func (quniform) Kind() string                   { return "quniform" }
func (d quniform) MarshalJSON() ([]byte, error) { return kindJSON(d.Kind(), d.lo, d.hi, d.q) }

type loguniform struct{ lo, hi float64 }

func (d loguniform) Sample(r *rand.Rand) any {
	a, b := math.Log(d.lo), math.Log(d.hi)
	return math.Exp(a + r.Float64()*(b-a))
}
func (loguniform) Kind() string                   { return "loguniform" }
func (d loguniform) MarshalJSON() ([]byte, error) { return kindJSON(d.Kind(), d.lo, d.hi) }

type randint struct{ lo, hi int }

func (d randint) Sample(r *rand.Rand) any      { return d.lo + r.IntN(d.hi-d.lo) }
func (randint) Kind() string                   { return "randint" }
func (d randint) MarshalJSON() ([]byte, error) { return kindJSON(d.Kind(), d.lo, d.hi) }

type choice []any

func (d choice) Sample(r *rand.Rand) any      { return d[r.IntN(len(d))] }
func (choice) Kind() string                   { return "choice" }
func (d choice) MarshalJSON() ([]byte, error) { return kindJSON(d.Kind(), []any(d)...) }

type grid []any

func (d grid) Sample(r *rand.Rand) any      { return d[r.IntN(len(d))] }
func (grid) Kind() string                   { return "grid_search" }
func (d grid) MarshalJSON() ([]byte, error) { return kindJSON(d.Kind(), []any(d)...) }

func kindJSON(kind string, args ...any) ([]byte, error) {
	if args == nil {
		args = []any{}
	}
	return json.Marshal(map[string]any{kind: args})
}

// roundFloat removes the binary noise of q multiples (0.30000000000000004).
func roundFloat(v float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	return f
}

// ErrSpace is wrapped by errors about a malformed param space.
var ErrSpace = errors.New("invalid param space")

// ParseSpace turns a param space in its JSON form into one with Domains: an
// object with exactly one key naming a search-space function, such as
// {"loguniform": [1e-4, 1e-1]} or {"grid_search": [16, 32]}, becomes that
// Domain, at any depth. Everything else is kept as decoded (numbers as
// float64, or int64 when they are whole).
func ParseSpace(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpace, err)
	}
	v, err := parseValue(raw, "")
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: the space is a search-space function itself; it must be an object of settings", ErrSpace)
	}
	return m, nil
}

func parseValue(v any, path string) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return int(i), nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrSpace, path, err)
		}
		return f, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			p, err := parseValue(e, joinPath(path, strconv.Itoa(i)))
			if err != nil {
				return nil, err
			}
			out[i] = p
		}
		return out, nil
	case map[string]any:
		if len(x) == 1 {
			for k, args := range x {
				if isKind(k) {
					return parseDomain(k, args, path)
				}
			}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			p, err := parseValue(e, joinPath(path, k))
			if err != nil {
				return nil, err
			}
			out[k] = p
		}
		return out, nil
	}
	return v, nil
}

func isKind(k string) bool {
	switch k {
	case "uniform", "quniform", "loguniform", "randint", "choice", "grid_search",
		"qloguniform", "qrandint", "lograndint", "qlograndint", "randn", "qrandn":
		return true
	}
	return false
}

func parseDomain(kind string, rawArgs any, path string) (Domain, error) {
	parsed, err := parseValue(rawArgs, path)
	if err != nil {
		return nil, err
	}
	args, ok := parsed.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s: %s wants a list of arguments", ErrSpace, path, kind)
	}
	return NewDomain(kind, args)
}

// NewDomain builds the search-space function kind from its arguments, as
// written in JSON or HCL: uniform(lo, hi), quniform(lo, hi, q),
// loguniform(lo, hi), randint(lo, hi), choice(values), grid_search(values),
// qloguniform(lo, hi, q), qrandint(lo, hi, q), lograndint(lo, hi),
// qlograndint(lo, hi, q), randn(mean, sd), qrandn(mean, sd, q).
func NewDomain(kind string, args []any) (Domain, error) {
	switch kind {
	case "choice", "grid_search":
		// choice([a, b]) and choice(a, b) are both accepted.
		if len(args) == 1 {
			if l, ok := args[0].([]any); ok {
				args = l
			}
		}
		if len(args) == 0 {
			return nil, fmt.Errorf("%w: %s of no values", ErrSpace, kind)
		}
		if kind == "choice" {
			return Choice(args...), nil
		}
		return GridSearch(args...), nil
	}
	want, ok := numberArgs[kind]
	if !ok {
		return nil, fmt.Errorf("%w: unknown search-space function %q", ErrSpace, kind)
	}
	if len(args) != want {
		return nil, fmt.Errorf("%w: %s wants %d numbers, got %d arguments", ErrSpace, kind, want, len(args))
	}
	f := make([]float64, want)
	for i, a := range args {
		v, ok := toFloat(a)
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: %s argument %d is %v, not a finite number", ErrSpace, kind, i+1, a)
		}
		f[i] = v
	}
	if integerKinds[kind] {
		// Checked before the conversion to int, which is undefined
		// outside int's range.
		for i, v := range f {
			if v != math.Trunc(v) {
				return nil, fmt.Errorf("%w: %s argument %d is %v: the bounds and step must be whole numbers", ErrSpace, kind, i+1, v)
			}
			if math.Abs(v) > MaxSpaceInt {
				return nil, fmt.Errorf("%w: %s argument %d is %v: integer bounds and steps must lie within ±%d (2^53)", ErrSpace, kind, i+1, v, int64(MaxSpaceInt))
			}
		}
	}
	d := newNumberDomain(kind, f)
	if err := d.(checker).check(); err != nil {
		return nil, err
	}
	return d, nil
}

// numberArgs is how many numbers each numeric search-space function takes.
var numberArgs = map[string]int{"uniform": 2, "quniform": 3, "loguniform": 2, "randint": 2,
	"qloguniform": 3, "qrandint": 3, "lograndint": 2, "qlograndint": 3, "randn": 2, "qrandn": 3}

// integerKinds are the functions whose bounds and step are integers.
var integerKinds = map[string]bool{"randint": true, "qrandint": true, "lograndint": true, "qlograndint": true}

// newNumberDomain builds a numeric function from its checked numbers,
// whole where integerKinds says so.
func newNumberDomain(kind string, f []float64) Domain {
	switch kind {
	case "uniform":
		return Uniform(f[0], f[1])
	case "quniform":
		return QUniform(f[0], f[1], f[2])
	case "loguniform":
		return LogUniform(f[0], f[1])
	case "randint":
		return RandInt(int(f[0]), int(f[1]))
	case "qloguniform":
		return QLogUniform(f[0], f[1], f[2])
	case "qrandint":
		return QRandInt(int(f[0]), int(f[1]), int(f[2]))
	case "lograndint":
		return LogRandInt(int(f[0]), int(f[1]))
	case "qlograndint":
		return QLogRandInt(int(f[0]), int(f[1]), int(f[2]))
	case "randn":
		return RandN(f[0], f[1])
	}
	return QRandN(f[0], f[1], f[2])
}

// MaxSpaceInt is the largest magnitude an integer function's bounds and
// step may have: every integer up to 2^53 is exactly a float64, as JSON
// and HCL carry it, and a range of two of them fits an int.
const MaxSpaceInt = 1 << 53

// checker is a numeric Domain that says what is wrong with its
// arguments, for NewDomain and for spaces built in Go (CheckSpace).
type checker interface{ check() error }

// CheckSpace checks every numeric search-space function of space, nested
// ones included, as NewDomain checks those it builds: a function built in
// Go with bounds that cannot be sampled (RandInt(-1<<62, 1<<62),
// Uniform(-1e308, 1e308)) is an error here, not a panic or an infinity in
// a trial.
func CheckSpace(space map[string]any) error {
	return walkDomains(space, "", func(name string, d Domain) error {
		if c, ok := d.(checker); ok {
			if err := c.check(); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})
}

// walkDomains calls fn with every Domain of v and its path name, those
// inside a choice's values included ("optimizer/1/momentum"), until fn
// returns an error.
func walkDomains(v any, path string, fn func(name string, d Domain) error) error {
	for _, s := range sites(v, nil, nil) {
		name := joinPath(path, s.name())
		if err := fn(name, s.dom); err != nil {
			return err
		}
		opts, _ := options(s.dom)
		for i, o := range opts {
			if d, ok := o.(Domain); ok {
				o = map[string]any{"": d}
			}
			if err := walkDomains(o, joinPath(name, strconv.Itoa(i)), fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// ErrGridSearch is wrapped by the error for a space with a grid_search
// given to a searcher that samples every value from its model (TPE, BOHB),
// as Ray's OptunaSearch refuses one: it would sample the grid as a choice,
// one value a trial, not run every value.
var ErrGridSearch = errors.New("grid_search needs a searcher that enumerates it")

// gridRefuser is the settings of a searcher that refuses grid_search.
type gridRefuser interface{ refusesGridSearch() }

// CheckGridSearch returns an error wrapping ErrGridSearch when the
// searcher kind does not take grid_search in its space, and nil for the
// others and for kinds it does not know.
func CheckGridSearch(searcher string) error {
	k, ok := searchers[searcher]
	if !ok {
		return nil
	}
	if _, refuses := k.settings().(gridRefuser); refuses {
		return fmt.Errorf("%w: the %s searcher samples every value from its model, so it would run one value of a grid_search, not each; use choice, or search_alg = \"random\" or \"grid\"", ErrGridSearch, searcher)
	}
	return nil
}

// refuseGrid returns CheckGridSearch's error, naming the grid_search,
// when space holds one.
func refuseGrid(searcher string, space map[string]any) error {
	cerr := CheckGridSearch(searcher)
	if cerr == nil {
		return nil
	}
	return walkDomains(space, "", func(name string, d Domain) error {
		if _, ok := d.(grid); ok {
			return fmt.Errorf("%s: %w", name, cerr)
		}
		return nil
	})
}

// checkRange checks that lo < hi, both finite, with a finite width.
func checkRange(kind string, lo, hi float64) error {
	switch {
	case math.IsNaN(lo) || math.IsInf(lo, 0) || math.IsNaN(hi) || math.IsInf(hi, 0):
		return fmt.Errorf("%w: %s(%v, %v): the bounds must be finite numbers", ErrSpace, kind, lo, hi)
	case !(lo < hi):
		return fmt.Errorf("%w: %s(%v, %v): lower bound must be below upper", ErrSpace, kind, lo, hi)
	case math.IsInf(hi-lo, 0):
		return fmt.Errorf("%w: %s(%v, %v): the range is wider than the largest float; narrow it", ErrSpace, kind, lo, hi)
	}
	return nil
}

// checkIntRange is checkRange for integer bounds, which must also lie
// within ±MaxSpaceInt.
func checkIntRange(kind string, vals ...int) error {
	for _, v := range vals {
		if v > MaxSpaceInt || v < -MaxSpaceInt {
			return fmt.Errorf("%w: %s: %d is outside ±%d (2^53), the integers a search space can hold", ErrSpace, kind, v, int64(MaxSpaceInt))
		}
	}
	return checkRange(kind, float64(vals[0]), float64(vals[1]))
}

// checkStep checks that the step q is positive and that a multiple of it
// lies within [lo, hi].
func checkStep(kind string, lo, hi, q float64) error {
	if !(q > 0) || math.IsInf(q, 0) {
		return fmt.Errorf("%w: %s step %v must be a positive number", ErrSpace, kind, q)
	}
	if math.Floor(hi/q)*q < lo-1e-9*math.Abs(lo) {
		return fmt.Errorf("%w: %s(%v, %v, %v): no multiple of the step lies within the bounds", ErrSpace, kind, lo, hi, q)
	}
	return nil
}

// multipleOf reports whether v is a multiple of q, give or take the
// rounding of decimal fractions (0.3 is 3 × 0.1).
func multipleOf(v, q float64) bool {
	r := v / q
	return math.Abs(r-math.Round(r)) <= 1e-9*math.Max(1, math.Abs(r))
}

func (d uniform) check() error { return checkRange(d.Kind(), d.lo, d.hi) }

// check refuses bounds that are not multiples of the step, as Ray does:
// the samples are the multiples within the bounds, so the bounds are
// samples too.
func (d quniform) check() error {
	if err := checkRange(d.Kind(), d.lo, d.hi); err != nil {
		return err
	}
	if err := checkStep(d.Kind(), d.lo, d.hi, d.q); err != nil {
		return err
	}
	for _, b := range []struct {
		name string
		v    float64
	}{{"lower", d.lo}, {"upper", d.hi}} {
		if !multipleOf(b.v, d.q) {
			return fmt.Errorf("%w: quniform(%v, %v, %v): the %s bound %v is not a multiple of the step %v", ErrSpace, d.lo, d.hi, d.q, b.name, b.v, d.q)
		}
	}
	return nil
}

func (d loguniform) check() error { return checkLogRange(d.Kind(), d.lo, d.hi) }

// checkLogRange is checkRange for a function sampled in log space, whose
// lower bound must be positive.
func checkLogRange(kind string, lo, hi float64) error {
	if err := checkRange(kind, lo, hi); err != nil {
		return err
	}
	if lo <= 0 {
		return fmt.Errorf("%w: %s lower bound %v must be positive", ErrSpace, kind, lo)
	}
	return nil
}

func (d randint) check() error { return checkIntRange(d.Kind(), d.lo, d.hi) }

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

func joinPath(base, k string) string {
	if base == "" {
		return k
	}
	return base + "/" + k
}

// site is one Domain found in a param space, with its path.
type site struct {
	path []string // map keys and slice indices (as decimal strings)
	dom  Domain
}

func (s site) name() string { return strings.Join(s.path, "/") }

// sites lists the Domains of a space in a fixed order (sorted map keys,
// slice order), so that sampling is reproducible.
func sites(v any, path []string, out []site) []site {
	switch x := v.(type) {
	case Domain:
		return append(out, site{path: append([]string(nil), path...), dom: x})
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = sites(x[k], append(path, k), out)
		}
	case []any:
		for i, e := range x {
			out = sites(e, append(path, strconv.Itoa(i)), out)
		}
	}
	return out
}

// deepCopy copies maps and slices of a space (Domains are immutable).
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// setPath replaces the value at path inside a deep-copied config.
func setPath(root any, path []string, val any) {
	cur := root
	for i, k := range path {
		last := i == len(path)-1
		switch x := cur.(type) {
		case map[string]any:
			if last {
				x[k] = val
				return
			}
			cur = x[k]
		case []any:
			idx, _ := strconv.Atoi(k)
			if last {
				x[idx] = val
				return
			}
			cur = x[idx]
		}
	}
}

// getPath reads the value at path, or nil.
func getPath(root any, path []string) any {
	cur := root
	for _, k := range path {
		switch x := cur.(type) {
		case map[string]any:
			cur = x[k]
		case []any:
			idx, err := strconv.Atoi(k)
			if err != nil || idx < 0 || idx >= len(x) {
				return nil
			}
			cur = x[idx]
		default:
			return nil
		}
	}
	return cur
}
