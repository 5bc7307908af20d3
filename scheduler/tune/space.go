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
	v := math.Round((d.lo+r.Float64()*(d.hi-d.lo))/d.q) * d.q
	return roundFloat(v)
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
	nums := func(n int) ([]float64, error) {
		if len(args) != n {
			return nil, fmt.Errorf("%w: %s wants %d numbers, got %d arguments", ErrSpace, kind, n, len(args))
		}
		out := make([]float64, n)
		for i, a := range args {
			f, ok := toFloat(a)
			if !ok {
				return nil, fmt.Errorf("%w: %s argument %d is %v, not a number", ErrSpace, kind, i+1, a)
			}
			out[i] = f
		}
		return out, nil
	}
	switch kind {
	case "qloguniform", "qrandint", "lograndint", "qlograndint", "randn", "qrandn":
		return newDomainMore(kind, args)
	case "uniform", "loguniform", "quniform", "randint":
		n := 2
		if kind == "quniform" {
			n = 3
		}
		f, err := nums(n)
		if err != nil {
			return nil, err
		}
		if !(f[0] < f[1]) {
			return nil, fmt.Errorf("%w: %s(%v, %v): lower bound must be below upper", ErrSpace, kind, f[0], f[1])
		}
		switch kind {
		case "uniform":
			return Uniform(f[0], f[1]), nil
		case "loguniform":
			if f[0] <= 0 {
				return nil, fmt.Errorf("%w: loguniform lower bound %v must be positive", ErrSpace, f[0])
			}
			return LogUniform(f[0], f[1]), nil
		case "quniform":
			if f[2] <= 0 {
				return nil, fmt.Errorf("%w: quniform step %v must be positive", ErrSpace, f[2])
			}
			return QUniform(f[0], f[1], f[2]), nil
		default:
			if f[0] != math.Trunc(f[0]) || f[1] != math.Trunc(f[1]) {
				return nil, fmt.Errorf("%w: randint bounds must be integers", ErrSpace)
			}
			return RandInt(int(f[0]), int(f[1])), nil
		}
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
	return nil, fmt.Errorf("%w: unknown search-space function %q", ErrSpace, kind)
}

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
