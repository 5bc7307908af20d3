package tune

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// The quantised, log-quantised, log-integer and normal search-space
// functions, and
// nested (conditional) spaces: a choice whose values hold functions of
// their own, which are sampled only in the trials that chose that value.

// QLogUniform samples like LogUniform and rounds to a multiple of q.
func QLogUniform(lo, hi, q float64) Domain { return qloguniform{lo, hi, q} }

// QRandInt samples an integer uniformly from [lo, hi] (hi included, as in
// Ray) and rounds it to a multiple of q.
func QRandInt(lo, hi, q int) Domain { return qrandint{lo, hi, q} }

// LogRandInt samples an integer log-uniformly from [lo, hi) (hi excluded,
// as in Ray's lograndint): each decade as likely as the next, for a layer
// width or a batch size.
func LogRandInt(lo, hi int) Domain { return lograndint{lo, hi} }

// QLogRandInt samples an integer log-uniformly from [lo, hi] (hi included,
// as in Ray) and rounds it to a multiple of q.
func QLogRandInt(lo, hi, q int) Domain { return qlograndint{lo, hi, q} }

// RandN samples a float from the normal distribution N(mean, sd²).
func RandN(mean, sd float64) Domain { return randn{mean, sd, 0} }

// QRandN samples like RandN and rounds to a multiple of q.
func QRandN(mean, sd, q float64) Domain { return randn{mean, sd, q} }

type qloguniform struct{ lo, hi, q float64 }

func (d qloguniform) Sample(r *rand.Rand) any {
	return quantize(loguniform{d.lo, d.hi}.Sample(r).(float64), d.q, d.lo, d.hi)
}
func (qloguniform) Kind() string                   { return "qloguniform" }
func (d qloguniform) MarshalJSON() ([]byte, error) { return kindJSON(d.Kind(), d.lo, d.hi, d.q) }

type qrandint struct{ lo, hi, q int }

func (d qrandint) Sample(r *rand.Rand) any {
	return int(quantize(float64(d.lo+r.IntN(d.hi-d.lo+1)), float64(d.q), float64(d.lo), float64(d.hi)))
}
func (qrandint) Kind() string                   { return "qrandint" }
func (d qrandint) MarshalJSON() ([]byte, error) { return kindJSON(d.Kind(), d.lo, d.hi, d.q) }

type lograndint struct{ lo, hi int }

func (d lograndint) Sample(r *rand.Rand) any {
	v := int(math.Floor(loguniform{float64(d.lo), float64(d.hi)}.Sample(r).(float64)))
	return min(max(v, d.lo), d.hi-1)
}
func (lograndint) Kind() string                   { return "lograndint" }
func (d lograndint) MarshalJSON() ([]byte, error) { return kindJSON(d.Kind(), d.lo, d.hi) }

type qlograndint struct{ lo, hi, q int }

func (d qlograndint) Sample(r *rand.Rand) any {
	v := loguniform{float64(d.lo), float64(d.hi)}.Sample(r).(float64)
	return int(quantize(v, float64(d.q), float64(d.lo), float64(d.hi)))
}
func (qlograndint) Kind() string                   { return "qlograndint" }
func (d qlograndint) MarshalJSON() ([]byte, error) { return kindJSON(d.Kind(), d.lo, d.hi, d.q) }

type randn struct{ mean, sd, q float64 }

func (d randn) Sample(r *rand.Rand) any {
	v := d.mean + d.sd*r.NormFloat64()
	if d.q > 0 {
		return roundFloat(math.Round(v/d.q) * d.q)
	}
	return v
}

func (d randn) Kind() string {
	if d.q > 0 {
		return "qrandn"
	}
	return "randn"
}

func (d randn) MarshalJSON() ([]byte, error) {
	if d.q > 0 {
		return kindJSON(d.Kind(), d.mean, d.sd, d.q)
	}
	return kindJSON(d.Kind(), d.mean, d.sd)
}

// quantize rounds v to a multiple of q, kept within the multiples of q
// that lie in [lo, hi] (a bound that is a multiple but for the rounding of
// decimal fractions counts as one), and within [lo, hi] itself.
func quantize(v, q, lo, hi float64) float64 {
	v = math.Round(v/q) * q
	if first := math.Ceil(lo/q-1e-9) * q; v < first {
		v = first
	}
	if last := math.Floor(hi/q+1e-9) * q; v > last {
		v = last
	}
	return min(max(roundFloat(v), lo), hi)
}

func (d qloguniform) check() error {
	if err := checkLogRange(d.Kind(), d.lo, d.hi); err != nil {
		return err
	}
	return checkStep(d.Kind(), d.lo, d.hi, d.q)
}

func (d qrandint) check() error {
	if err := checkIntRange(d.Kind(), d.lo, d.hi, d.q); err != nil {
		return err
	}
	return checkStep(d.Kind(), float64(d.lo), float64(d.hi), float64(d.q))
}

func (d lograndint) check() error {
	if err := checkIntRange(d.Kind(), d.lo, d.hi); err != nil {
		return err
	}
	return checkLogRange(d.Kind(), float64(d.lo), float64(d.hi))
}

func (d qlograndint) check() error {
	if err := checkIntRange(d.Kind(), d.lo, d.hi, d.q); err != nil {
		return err
	}
	if err := checkLogRange(d.Kind(), float64(d.lo), float64(d.hi)); err != nil {
		return err
	}
	return checkStep(d.Kind(), float64(d.lo), float64(d.hi), float64(d.q))
}

func (d randn) check() error {
	if math.IsNaN(d.mean) || math.IsInf(d.mean, 0) {
		return fmt.Errorf("%w: %s mean %v must be a finite number", ErrSpace, d.Kind(), d.mean)
	}
	if !(d.sd > 0) || math.IsInf(d.sd, 0) {
		return fmt.Errorf("%w: %s standard deviation %v must be a positive number", ErrSpace, d.Kind(), d.sd)
	}
	if d.Kind() == "qrandn" && (!(d.q > 0) || math.IsInf(d.q, 0)) {
		return fmt.Errorf("%w: qrandn step %v must be a positive number", ErrSpace, d.q)
	}
	return nil
}

// options returns the values of a choice or grid_search.
func options(d Domain) ([]any, bool) {
	switch x := d.(type) {
	case choice:
		return x, true
	case grid:
		return x, true
	}
	return nil, false
}

// resolveNested samples the functions inside a chosen value (a nested,
// conditional space): pick chooses each, by its path name, which is the
// choice's name, the index of the value chosen, and the path inside it
// ("optimizer/1/momentum"). A value without functions is returned as is.
func resolveNested(val any, name string, idx int, pick func(name string, d Domain) any, params map[string]any) any {
	inner := sites(val, nil, nil)
	if len(inner) == 0 {
		return val
	}
	if d, ok := val.(Domain); ok { // choice(loguniform(...), ...): the value is itself a function
		return pickNested(d, name+"/"+strconv.Itoa(idx), pick, params)
	}
	out := deepCopy(val)
	for _, s := range inner {
		setPath(out, s.path, pickNested(s.dom, name+"/"+strconv.Itoa(idx)+"/"+s.name(), pick, params))
	}
	return out
}

// pickNested picks a value for d at name, resolving deeper nesting.
func pickNested(d Domain, name string, pick func(name string, d Domain) any, params map[string]any) any {
	v := pick(name, d)
	params[name] = v
	if opts, ok := options(d); ok {
		for i, o := range opts {
			if sameValue(o, v) {
				v = resolveNested(o, name, i, pick, params)
				params[name] = v
				return v
			}
		}
	}
	return v
}

// optionIndex finds the option of a choice that v is, or was resolved
// from (an option holding functions matches a value that has the same
// fixed parts).
func optionIndex(opts []any, v any) (int, bool) {
	for i, o := range opts {
		if matchesOption(o, v) {
			return i, true
		}
	}
	return 0, false
}

func matchesOption(o, v any) bool {
	if len(sites(o, nil, nil)) == 0 {
		return sameValue(o, v)
	}
	switch x := o.(type) {
	case Domain:
		return true
	case map[string]any:
		m, ok := v.(map[string]any)
		if !ok || len(m) != len(x) {
			return false
		}
		for k, e := range x {
			if _, ok := m[k]; !ok || !matchesOption(e, m[k]) {
				return false
			}
		}
		return true
	case []any:
		l, ok := v.([]any)
		if !ok || len(l) != len(x) {
			return false
		}
		for i := range x {
			if !matchesOption(x[i], l[i]) {
				return false
			}
		}
		return true
	}
	return false
}
