package driver

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"

	"github.com/nomad-train/nomad-train/driver/proto/hclspec"
)

// This file turns the hclspec schemas the driver returns into cty types and
// decodes cty-msgpack bytes against them, the way Nomad encodes them. The
// decoder is lenient where Nomad's encoder varies (numbers as int, float or
// decimal string; lists as arrays) and strict about names: an unknown field,
// a missing required field or a value of the wrong type is an error that
// names the field by its path (e.g. "rendezvous.backend").

// ConfigError is a decoding or validation error about one field.
type ConfigError struct {
	Field string // dotted path, e.g. "checkpoint.score_order"
	Msg   string
}

// Error implements error, naming the field.
func (e *ConfigError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return fmt.Sprintf("field %q: %s", e.Field, e.Msg)
}

func fieldErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Schema builders. Attribute names inside Default carry their name
// explicitly, because Nomad reads a Default's primary without an implied name.

func specAttr(name, typ string, required bool) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Attr{Attr: &hclspec.Attr{Name: name, Type: typ, Required: required}}}
}

func specDefault(primary *hclspec.Spec, literal string) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Default{Default: &hclspec.Default{
		Primary: primary,
		Default: &hclspec.Spec{Block: &hclspec.Spec_Literal{Literal: &hclspec.Literal{Value: literal}}},
	}}}
}

func specBlock(name string, nested *hclspec.Spec) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_BlockValue{BlockValue: &hclspec.Block{Name: name, Nested: nested}}}
}

func specObject(attrs map[string]*hclspec.Spec) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Object{Object: &hclspec.Object{Attributes: attrs}}}
}

// impliedType is the cty type of the value Nomad decodes with spec.
func impliedType(s *hclspec.Spec) (cty.Type, error) {
	switch b := s.GetBlock().(type) {
	case *hclspec.Spec_Object:
		atys := make(map[string]cty.Type, len(b.Object.GetAttributes()))
		for name, child := range b.Object.GetAttributes() {
			ty, err := impliedType(child)
			if err != nil {
				return cty.NilType, fmt.Errorf("attribute %s: %w", name, err)
			}
			atys[name] = ty
		}
		return cty.Object(atys), nil
	case *hclspec.Spec_Array:
		etys := make([]cty.Type, 0, len(b.Array.GetValues()))
		for i, child := range b.Array.GetValues() {
			ty, err := impliedType(child)
			if err != nil {
				return cty.NilType, fmt.Errorf("element %d: %w", i, err)
			}
			etys = append(etys, ty)
		}
		return cty.Tuple(etys), nil
	case *hclspec.Spec_Attr:
		return parseTypeExpr(b.Attr.GetType())
	case *hclspec.Spec_BlockAttrs:
		ty, err := parseTypeExpr(b.BlockAttrs.GetType())
		return cty.Map(ty), err
	case *hclspec.Spec_BlockValue:
		return impliedType(b.BlockValue.GetNested())
	case *hclspec.Spec_BlockList:
		ty, err := impliedType(b.BlockList.GetNested())
		return cty.List(ty), err
	case *hclspec.Spec_BlockSet:
		ty, err := impliedType(b.BlockSet.GetNested())
		return cty.Set(ty), err
	case *hclspec.Spec_BlockMap:
		ty, err := impliedType(b.BlockMap.GetNested())
		for range b.BlockMap.GetLabels() {
			ty = cty.Map(ty)
		}
		return ty, err
	case *hclspec.Spec_Default:
		return impliedType(b.Default.GetPrimary())
	case *hclspec.Spec_Literal:
		v, err := literalValue(b.Literal.GetValue())
		return v.Type(), err
	default:
		return cty.NilType, errors.New("empty spec")
	}
}

func parseTypeExpr(src string) (cty.Type, error) {
	expr, diags := hclsyntax.ParseExpression([]byte(src), "type", hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilType, fmt.Errorf("parse type %q: %s", src, diags.Error())
	}
	ty, diags := typeexpr.TypeConstraint(expr)
	if diags.HasErrors() {
		return cty.NilType, fmt.Errorf("type %q: %s", src, diags.Error())
	}
	return ty, nil
}

func literalValue(src string) (cty.Value, error) {
	expr, diags := hclsyntax.ParseExpression([]byte(src), "literal", hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("parse literal %q: %s", src, diags.Error())
	}
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("literal %q: %s", src, diags.Error())
	}
	return v, nil
}

// decodeMsgpack decodes cty-msgpack bytes against spec: it checks names and
// types, applies defaults the client would have applied and enforces
// required attributes. Empty input decodes as an absent config.
func decodeMsgpack(s *hclspec.Spec, b []byte) (cty.Value, error) {
	want, err := impliedType(s)
	if err != nil {
		return cty.NilVal, fmt.Errorf("schema: %w", err)
	}
	raw := cty.NullVal(cty.DynamicPseudoType)
	if len(b) > 0 {
		if err := checkMsgpack(b); err != nil {
			return cty.NilVal, &ConfigError{Msg: fmt.Sprintf("malformed msgpack: %v", err)}
		}
		rawTy, err := ctymsgpack.ImpliedType(b)
		if err != nil {
			return cty.NilVal, &ConfigError{Msg: fmt.Sprintf("malformed msgpack: %v", err)}
		}
		if raw, err = ctymsgpack.Unmarshal(b, rawTy); err != nil {
			return cty.NilVal, &ConfigError{Msg: fmt.Sprintf("malformed msgpack: %v", err)}
		}
	}
	if raw.IsNull() && want.IsObjectType() {
		// Nomad sends no bytes for an absent config block; treat it as {}.
		raw = cty.EmptyObjectVal
	}
	v, err := conform(raw, want, "")
	if err != nil {
		return cty.NilVal, err
	}
	return applySpec(s, v, "")
}

// maxNumberText bounds a number given as a string (Nomad's encoder writes
// big numbers so); no field of the schema needs more digits.
const maxNumberText = 64

// conform converts raw (typed by the msgpack structure) into want, naming
// the field that does not fit.
func conform(raw cty.Value, want cty.Type, path string) (cty.Value, error) {
	if raw.IsNull() {
		return cty.NullVal(want), nil
	}
	if !raw.IsKnown() {
		return cty.NilVal, fieldErr(path, "value is not known")
	}
	rt := raw.Type()
	switch {
	case want.IsObjectType():
		if !rt.IsObjectType() && !rt.IsMapType() {
			return cty.NilVal, fieldErr(path, "a block or object is required, got %s", rt.FriendlyName())
		}
		given := raw.AsValueMap()
		var unknown []string
		for name := range given {
			if !want.HasAttribute(name) {
				unknown = append(unknown, join(path, name))
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return cty.NilVal, fieldErr(unknown[0], "unknown field (not in the schema)")
		}
		atys := want.AttributeTypes()
		out := make(map[string]cty.Value, len(atys))
		for _, name := range slices.Sorted(maps.Keys(atys)) {
			aty := atys[name]
			v, ok := given[name]
			if !ok {
				v = cty.NullVal(cty.DynamicPseudoType)
			}
			cv, err := conform(v, aty, join(path, name))
			if err != nil {
				return cty.NilVal, err
			}
			out[name] = cv
		}
		return cty.ObjectVal(out), nil
	case want.IsListType() || want.IsSetType():
		if !rt.IsTupleType() && !rt.IsListType() && !rt.IsSetType() {
			return cty.NilVal, fieldErr(path, "a list is required, got %s", rt.FriendlyName())
		}
		var elems []cty.Value
		for i, e := range raw.AsValueSlice() {
			cv, err := conform(e, want.ElementType(), fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return cty.NilVal, err
			}
			elems = append(elems, cv)
		}
		if len(elems) == 0 {
			if want.IsListType() {
				return cty.ListValEmpty(want.ElementType()), nil
			}
			return cty.SetValEmpty(want.ElementType()), nil
		}
		if want.IsListType() {
			return cty.ListVal(elems), nil
		}
		return cty.SetVal(elems), nil
	case want.IsMapType():
		if !rt.IsObjectType() && !rt.IsMapType() {
			return cty.NilVal, fieldErr(path, "a map is required, got %s", rt.FriendlyName())
		}
		elems := map[string]cty.Value{}
		for k, e := range raw.AsValueMap() {
			cv, err := conform(e, want.ElementType(), join(path, k))
			if err != nil {
				return cty.NilVal, err
			}
			elems[k] = cv
		}
		if len(elems) == 0 {
			return cty.MapValEmpty(want.ElementType()), nil
		}
		return cty.MapVal(elems), nil
	case want == cty.DynamicPseudoType:
		return raw, nil
	default:
		if want == cty.Number && rt == cty.String && len(raw.AsString()) > maxNumberText {
			// Parsing a long decimal string costs its length squared: a
			// megabyte of digits took 10 s.
			return cty.NilVal, fieldErr(path, "a number is required, got a string of %d characters", len(raw.AsString()))
		}
		if rt.IsPrimitiveType() && want.IsPrimitiveType() && rt != want && !(want == cty.String || rt == cty.String) {
			// bool <-> number is never what the user meant.
			return cty.NilVal, fieldErr(path, "a %s is required, got %s", want.FriendlyName(), rt.FriendlyName())
		}
		cv, err := convert.Convert(raw, want)
		if err != nil {
			return cty.NilVal, fieldErr(path, "a %s is required, got %s", want.FriendlyName(), rt.FriendlyName())
		}
		return cv, nil
	}
}

// applySpec fills defaults and checks required attributes and blocks.
func applySpec(s *hclspec.Spec, v cty.Value, path string) (cty.Value, error) {
	switch b := s.GetBlock().(type) {
	case *hclspec.Spec_Object:
		if v.IsNull() {
			return v, nil
		}
		out := v.AsValueMap()
		attrs := b.Object.GetAttributes()
		for _, name := range slices.Sorted(maps.Keys(attrs)) { // the first problem, deterministically
			cv, err := applySpec(attrs[name], out[name], join(path, name))
			if err != nil {
				return cty.NilVal, err
			}
			out[name] = cv
		}
		return cty.ObjectVal(out), nil
	case *hclspec.Spec_Attr:
		if b.Attr.GetRequired() && v.IsNull() {
			return cty.NilVal, fieldErr(path, "required field is missing")
		}
		return v, nil
	case *hclspec.Spec_BlockValue:
		if v.IsNull() {
			if b.BlockValue.GetRequired() {
				return cty.NilVal, fieldErr(path, "required block is missing")
			}
			return v, nil
		}
		return applySpec(b.BlockValue.GetNested(), v, path)
	case *hclspec.Spec_Default:
		if !v.IsNull() {
			return applySpec(b.Default.GetPrimary(), v, path)
		}
		lit, err := defaultValue(b.Default.GetDefault())
		if err != nil {
			return cty.NilVal, fmt.Errorf("schema default of %s: %w", path, err)
		}
		cv, err := convert.Convert(lit, v.Type())
		if err != nil {
			return cty.NilVal, fmt.Errorf("schema default of %s: %w", path, err)
		}
		return cv, nil
	default:
		return v, nil
	}
}

func defaultValue(s *hclspec.Spec) (cty.Value, error) {
	if lit, ok := s.GetBlock().(*hclspec.Spec_Literal); ok {
		return literalValue(lit.Literal.GetValue())
	}
	return cty.NilVal, errors.New("only literal defaults are supported")
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Readers for decoded objects. The value is a known, conformed object.

func getString(obj cty.Value, name string) string {
	v := obj.GetAttr(name)
	if v.IsNull() {
		return ""
	}
	return v.AsString()
}

func getBool(obj cty.Value, name string) bool {
	v := obj.GetAttr(name)
	return !v.IsNull() && v.True()
}

func getStrings(obj cty.Value, name string) []string {
	v := obj.GetAttr(name)
	if v.IsNull() {
		return nil
	}
	var out []string
	for _, e := range v.AsValueSlice() {
		if !e.IsNull() {
			out = append(out, e.AsString())
		}
	}
	return out
}

// getInt reads a whole number; has reports whether it was set.
func getInt(obj cty.Value, name, path string) (n int64, has bool, err error) {
	v := obj.GetAttr(name)
	if v.IsNull() {
		return 0, false, nil
	}
	bf := v.AsBigFloat()
	if e := bf.MantExp(nil); e > 64 || e < -64 {
		// Printing such a number in decimal takes time that grows with the
		// square of its exponent: 1e-99999 took 12 s.
		return 0, true, fieldErr(join(path, name), "number is out of range")
	}
	if !bf.IsInt() {
		return 0, true, fieldErr(join(path, name), "a whole number is required, got %s", bf.Text('g', -1))
	}
	i, acc := bf.Int64()
	if acc != 0 {
		return 0, true, fieldErr(join(path, name), "number %s is out of range", bf.Text('g', -1))
	}
	return i, true, nil
}

// oneOf checks that v is one of allowed.
func oneOf(field, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fieldErr(field, "must be one of %s, got %q", strings.Join(quoteAll(allowed), ", "), v)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
