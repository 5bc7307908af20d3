package trainspec

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// The search space: the functions config = {...} may call (uniform,
// choice, grid_search, ...), the checks of their arguments, and the
// sample a tune spec's config is checked with.

// Search-space function names, usable anywhere inside config = {...}.
var searchSpaceFuncs = []string{"choice", "grid_search", "uniform", "quniform", "loguniform", "randint",
	"qloguniform", "qrandint", "lograndint", "qlograndint", "randn", "qrandn"}

// numberSpaceArgs is how many numbers each numeric search-space function
// takes.
var numberSpaceArgs = map[string]int{"uniform": 2, "quniform": 3, "loguniform": 2, "randint": 2,
	"qloguniform": 3, "qrandint": 3, "lograndint": 2, "qlograndint": 3, "randn": 2, "qrandn": 3}

// TuneFunctions returns the search-space functions: uniform(lo, hi),
// quniform(lo, hi, q), loguniform(lo, hi), qloguniform(lo, hi, q),
// randint(lo, hi) (hi excluded), qrandint(lo, hi, q) (hi included),
// lograndint(lo, hi) (hi excluded), qlograndint(lo, hi, q) (hi included),
// randn(mean, sd), qrandn(mean, sd, q), choice(list) and grid_search(list).
// Each returns the function's JSON form, an object with one key, e.g.
// { loguniform = [0.0001, 0.1] }.
func TuneFunctions() map[string]function.Function {
	fns := map[string]function.Function{}
	for name, n := range numberSpaceArgs {
		fns[name] = numberSpaceFunc(name, n)
	}
	for _, name := range searchSpaceFuncs[:2] {
		fns[name] = listSpaceFunc(name)
	}
	return fns
}

func numberSpaceFunc(name string, n int) function.Function {
	names := []string{"lower", "upper", "q"}
	if strings.HasSuffix(name, "randn") {
		names = []string{"mean", "sd", "q"}
	}
	params := make([]function.Parameter, n)
	for i := range params {
		params[i] = function.Parameter{Name: names[i], Type: cty.Number}
	}
	elems := make([]cty.Type, n)
	for i := range elems {
		elems[i] = cty.Number
	}
	ret := cty.Object(map[string]cty.Type{name: cty.Tuple(elems)})
	return function.New(&function.Spec{
		Params: params,
		Type:   function.StaticReturnType(ret),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if err := checkSpaceArgs(name, args); err != nil {
				return cty.NilVal, err
			}
			return cty.ObjectVal(map[string]cty.Value{name: cty.TupleVal(args)}), nil
		},
	})
}

// maxSpaceInt is the largest magnitude of an integer function's bounds
// and step: every integer up to 2^53 is exactly a float64, as the tuner
// reads them (scheduler/tune's MaxSpaceInt).
const maxSpaceInt = 1 << 53

// checkSpaceArgs checks a numeric search-space function's arguments; an
// error names the argument at fault, which the diagnostic points at.
func checkSpaceArgs(name string, args []cty.Value) error {
	f := make([]float64, len(args))
	for i, a := range args {
		f[i], _ = a.AsBigFloat().Float64()
		if math.IsInf(f[i], 0) {
			return function.NewArgErrorf(i, "%s: the argument must be a finite number", name)
		}
	}
	if len(f) == 3 && f[2] <= 0 {
		return function.NewArgErrorf(2, "%s: the step must be positive", name)
	}
	switch name {
	case "randn", "qrandn":
		if f[1] <= 0 {
			return function.NewArgErrorf(1, "%s: the standard deviation must be positive", name)
		}
		return nil
	}
	if strings.Contains(name, "randint") {
		for i, v := range f {
			if v != math.Trunc(v) {
				return function.NewArgErrorf(i, "%s: the bounds and the step must be whole numbers; got %v", name, v)
			}
			if math.Abs(v) > maxSpaceInt {
				return function.NewArgErrorf(i, "%s: integer bounds and steps must lie within ±9007199254740992 (2^53); got %v", name, v)
			}
		}
	}
	switch {
	case !(f[0] < f[1]):
		return function.NewArgErrorf(1, "%s: the upper bound must exceed the lower bound %v", name, f[0])
	case math.IsInf(f[1]-f[0], 0):
		return function.NewArgErrorf(1, "%s: the range from %v to %v is wider than the largest float; narrow it", name, f[0], f[1])
	case strings.HasPrefix(strings.TrimPrefix(name, "q"), "log") && f[0] <= 0:
		return function.NewArgErrorf(0, "%s: the lower bound must be positive", name)
	case name == "quniform":
		// As Ray: the samples are the multiples of the step within the
		// bounds, so the bounds must be multiples too.
		for i := range 2 {
			if !multipleOf(f[i], f[2]) {
				return function.NewArgErrorf(i, "quniform: the bound %v is not a multiple of the step %v", f[i], f[2])
			}
		}
	case len(f) == 3 && math.Floor(f[1]/f[2])*f[2] < f[0]-1e-9*math.Abs(f[0]):
		return function.NewArgErrorf(2, "%s: no multiple of the step %v lies from %v to %v", name, f[2], f[0], f[1])
	}
	return nil
}

// multipleOf reports whether v is a multiple of q, give or take the
// rounding of decimal fractions (0.3 is 3 × 0.1).
func multipleOf(v, q float64) bool {
	r := v / q
	return math.Abs(r-math.Round(r)) <= 1e-9*math.Max(1, math.Abs(r))
}

func listSpaceFunc(name string) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "values", Type: cty.DynamicPseudoType}},
		Type: func(args []cty.Value) (cty.Type, error) {
			ty := args[0].Type()
			if !ty.IsTupleType() && !ty.IsListType() && !ty.IsSetType() {
				return cty.NilType, function.NewArgErrorf(0, "%s takes a list of values, such as %s([16, 32, 64])", name, name)
			}
			return cty.Object(map[string]cty.Type{name: ty}), nil
		},
		Impl: func(args []cty.Value, ret cty.Type) (cty.Value, error) {
			if args[0].IsKnown() && !args[0].IsNull() && args[0].LengthInt() == 0 {
				return cty.NilVal, function.NewArgErrorf(0, "%s needs at least one value", name)
			}
			return cty.ObjectVal(map[string]cty.Value{name: args[0]}), nil
		},
	})
}

var (
	tuneSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "num_samples"}, {Name: "max_concurrent_trials"}, {Name: "metric"}, {Name: "mode"},
			{Name: "time_attr"}, {Name: "time_budget"}, {Name: "searcher"}, {Name: "seed"}, {Name: "max_failures"}, {Name: "fail_fast"},
			{Name: "search_alg"}, {Name: "stop"},
		},
		Blocks: []hcl.BlockHeaderSchema{{Type: "scheduler"}, {Type: "search_alg"}, {Type: "stop_on_plateau"}},
	}
	plateauSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "metric"}, {Name: "std"}, {Name: "num_results"}, {Name: "grace_period"}},
	}
)

// noSearchSpace reports search-space functions in the config of a spec
// without a tune block: `nomad-train run` would hand them to the training
// function as objects. It reports whether there were none.
func (d *decoder) noSearchSpace(attr *hcl.Attribute, configJSON []byte) bool {
	var v any
	if json.Unmarshal(configJSON, &v) != nil {
		return true
	}
	if name := findSearchSpace(v); name != "" {
		d.errorf(attr, "Search space without a tune block",
			"config uses %s(...), which only a tune block can sample; add tune { ... } and run `nomad-train tune`, or give a plain value.", name)
		return false
	}
	return true
}

// sampleConfig replaces each search-space function of a config (JSON)
// with a value it could sample, for checking the config's keys and types
// as every trial will have them: a choice's or grid_search's first value
// (sampled in turn), a numeric function's first argument (its lower
// bound, or randn's mean). config is returned as it is when it does not
// decode.
func sampleConfig(config []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(config))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return config
	}
	out, err := json.Marshal(sampleValue(v))
	if err != nil {
		return config
	}
	return out
}

func sampleValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if kind := spaceKind(x); kind != "" {
			if args, ok := x[kind].([]any); ok && len(args) > 0 {
				return sampleValue(args[0])
			}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = sampleValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = sampleValue(e)
		}
		return out
	}
	return v
}

// spaceKind returns the search-space function that m (a decoded JSON
// object) is the JSON form of, or "".
func spaceKind(m map[string]any) string {
	if len(m) != 1 {
		return ""
	}
	for k := range m {
		if slices.Contains(searchSpaceFuncs, k) {
			return k
		}
	}
	return ""
}

// findSearchSpace returns the name of a search-space function used inside
// v (a decoded JSON value), or "". With kind set, it looks for that
// function only.
func findSearchSpace(v any, kind ...string) string {
	switch x := v.(type) {
	case map[string]any:
		if k := spaceKind(x); k != "" && (len(kind) == 0 || slices.Contains(kind, k)) {
			return k
		}
		for _, e := range x {
			if n := findSearchSpace(e, kind...); n != "" {
				return n
			}
		}
	case []any:
		for _, e := range x {
			if n := findSearchSpace(e, kind...); n != "" {
				return n
			}
		}
	}
	return ""
}
