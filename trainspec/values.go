package trainspec

import (
	"fmt"
	"math"
	"strings"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// decoder evaluates attributes in one evaluation context and accumulates
// every diagnostic, so that a spec's errors are all reported together.
type decoder struct {
	ctx         *hcl.EvalContext
	builtins    []string                                                              // accepted entrypoint builtins
	checkConfig func(builtin string, config []byte, minWorkers, maxWorkers int) error // ParseOptions.CheckConfig
	// checkScheduler is ParseOptions.CheckScheduler.
	checkScheduler func(kind, metric string, settings []byte) error
	// checkSearcher is ParseOptions.CheckSearcher.
	checkSearcher func(kind, metric string, settings []byte) error
	// checkGridSearch is ParseOptions.CheckGridSearch.
	checkGridSearch func(searcher string) error
	diags           hcl.Diagnostics
}

// content decodes body against schema, recording diagnostics.
func (d *decoder) content(body hcl.Body, schema *hcl.BodySchema) *hcl.BodyContent {
	c, diags := body.Content(schema)
	d.diags = append(d.diags, diags...)
	return c
}

// single returns the only block of type typ in c, reporting extra ones; nil
// when there is none.
func (d *decoder) single(c *hcl.BodyContent, typ string) *hcl.Block {
	var first *hcl.Block
	for _, b := range c.Blocks {
		if b.Type != typ {
			continue
		}
		if first != nil {
			d.diags = append(d.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Duplicate %s block", typ),
				Detail:   fmt.Sprintf("Only one %s block is allowed here; the first was defined at %s.", typ, first.DefRange),
				Subject:  b.DefRange.Ptr(),
			})
			continue
		}
		first = b
	}
	return first
}

// errorf records an error about attr's value.
func (d *decoder) errorf(attr *hcl.Attribute, summary, format string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity:    hcl.DiagError,
		Summary:     summary,
		Detail:      fmt.Sprintf(format, args...),
		Subject:     attr.Expr.Range().Ptr(),
		Context:     attr.Range.Ptr(),
		Expression:  attr.Expr,
		EvalContext: d.ctx,
	})
}

// rangeErrorf records an error about a range that is not an attribute value.
func (d *decoder) rangeErrorf(rng hcl.Range, summary, format string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  rng.Ptr(),
	})
}

// value evaluates attr and converts it to ty. ok is false when attr is nil,
// the value is null or unknown (a variable without a value), or an error was
// recorded.
func (d *decoder) value(attr *hcl.Attribute, ty cty.Type) (cty.Value, bool) {
	if attr == nil {
		return cty.NilVal, false
	}
	val, diags := attr.Expr.Value(d.ctx)
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() || val.IsNull() || !val.IsWhollyKnown() {
		return cty.NilVal, false
	}
	cv, err := convert.Convert(val, ty)
	if err != nil {
		d.diags = append(d.diags, typeError(attr, d.ctx, err))
		return cty.NilVal, false
	}
	return cv, true
}

// typeError is the diagnostic for a value that does not convert to the type
// an attribute wants.
func typeError(attr *hcl.Attribute, ctx *hcl.EvalContext, err error) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity:    hcl.DiagError,
		Summary:     "Incorrect attribute value type",
		Detail:      fmt.Sprintf("Inappropriate value for attribute %q: %s.", attr.Name, err),
		Subject:     attr.Expr.Range().Ptr(),
		Context:     attr.Range.Ptr(),
		Expression:  attr.Expr,
		EvalContext: ctx,
	}
}

func (d *decoder) str(attr *hcl.Attribute, dst *string) bool {
	v, ok := d.value(attr, cty.String)
	if ok {
		*dst = v.AsString()
	}
	return ok
}

// nonEmpty is str that also rejects "".
func (d *decoder) nonEmpty(attr *hcl.Attribute, dst *string) bool {
	var s string
	if !d.str(attr, &s) {
		return false
	}
	if strings.TrimSpace(s) == "" {
		d.errorf(attr, "Invalid value", "%s must not be empty.", attr.Name)
		return false
	}
	*dst = s
	return true
}

func (d *decoder) boolean(attr *hcl.Attribute, dst *bool) bool {
	v, ok := d.value(attr, cty.Bool)
	if ok {
		*dst = v.True()
	}
	return ok
}

// integer reads a whole number within [lo, hi].
func (d *decoder) integer(attr *hcl.Attribute, dst *int, lo, hi int) bool {
	v, ok := d.value(attr, cty.Number)
	if !ok {
		return false
	}
	bf := v.AsBigFloat()
	if !bf.IsInt() {
		d.errorf(attr, "Invalid value", "%s must be a whole number; got %s.", attr.Name, bf.Text('g', 10))
		return false
	}
	i, _ := bf.Int64()
	if bf.IsInf() || i < int64(lo) || i > int64(hi) || i < math.MinInt32 || i > math.MaxInt32 {
		d.errorf(attr, "Invalid value", "%s must be %s; got %s.", attr.Name, bounds(lo, hi, bf.Sign() > 0 && i >= int64(lo)), bf.Text('g', 10))
		return false
	}
	*dst = int(i)
	return true
}

// bounds says the range [lo, hi] in words: "at least lo" when hi is
// MaxInt32, unless the value given is above it (above), which the
// reader is then told.
func bounds(lo, hi int, above bool) string {
	switch {
	case hi == math.MaxInt32 && !above:
		return fmt.Sprintf("at least %d", lo)
	default:
		return fmt.Sprintf("between %d and %d", lo, hi)
	}
}

// enum reads a string that must be one of allowed.
func (d *decoder) enum(attr *hcl.Attribute, dst *string, allowed ...string) bool {
	var s string
	if !d.str(attr, &s) {
		return false
	}
	for _, a := range allowed {
		if s == a {
			*dst = s
			return true
		}
	}
	d.errorf(attr, "Invalid value", "%s must be one of %s; got %q.%s", attr.Name, quoteList(allowed), s, suggest(s, allowed))
	return false
}

func (d *decoder) strList(attr *hcl.Attribute, dst *[]string) bool {
	v, ok := d.value(attr, cty.List(cty.String))
	if !ok {
		return false
	}
	out := make([]string, 0, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() {
			d.errorf(attr, "Invalid value", "%s must not contain null.", attr.Name)
			return false
		}
		out = append(out, e.AsString())
	}
	*dst = out
	return true
}

func (d *decoder) strMap(attr *hcl.Attribute, dst *map[string]string) bool {
	v, ok := d.value(attr, cty.Map(cty.String))
	if !ok {
		return false
	}
	out := make(map[string]string, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		if e.IsNull() {
			d.errorf(attr, "Invalid value", "%s[%q] must not be null.", attr.Name, k.AsString())
			return false
		}
		out[k.AsString()] = e.AsString()
	}
	*dst = out
	return true
}

// keyErrorf records an error about one key of a map attribute, pointing at
// the key when the map is written out in the spec.
func (d *decoder) keyErrorf(attr *hcl.Attribute, key, summary, format string, args ...any) {
	rng := attr.Expr.Range()
	if obj, ok := attr.Expr.(*hclsyntax.ObjectConsExpr); ok {
		for _, item := range obj.Items {
			k, diags := item.KeyExpr.Value(d.ctx)
			if !diags.HasErrors() && k.Type() == cty.String && k.IsKnown() && !k.IsNull() && k.AsString() == key {
				rng = item.KeyExpr.Range()
			}
		}
	}
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  rng.Ptr(),
		Context:  attr.Range.Ptr(),
	})
}

// suggest returns ` Did you mean "x"?` for the closest of options, or "".
func suggest(given string, options []string) string {
	best, bestDist := "", 3
	for _, o := range options {
		if strings.EqualFold(given, o) {
			return fmt.Sprintf(" Did you mean %q?", o)
		}
		if dist := levenshtein.Distance(given, o, nil); dist < bestDist {
			best, bestDist = o, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" Did you mean %q?", best)
}

func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	switch len(q) {
	case 1:
		return q[0]
	case 2:
		return q[0] + " or " + q[1]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
