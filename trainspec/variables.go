package trainspec

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// EnvVarPrefix is the prefix of environment variables that set spec
// variables, as in Nomad: NOMAD_VAR_epochs=10 sets var.epochs.
const EnvVarPrefix = "NOMAD_VAR_"

// ParseOptions are the variable values from outside the spec, and where the
// files read are recorded.
type ParseOptions struct {
	// Vars are -var name=value flags. A value is taken literally for a
	// variable of type string (or no type); otherwise it is parsed as an HCL
	// expression, as Nomad and Terraform do.
	Vars map[string]string
	// VarFiles are -var-file paths, applied in order (later ones win).
	VarFiles []string
	// Getenv looks up NOMAD_VAR_<name> for each declared variable; nil looks
	// up nothing.
	Getenv func(string) string
	// Builtins are the names entrypoint { builtin = ... } accepts; nil
	// means KnownBuiltins(). A binary that carries more builtins passes its
	// own list.
	Builtins []string
	// CheckConfig, when set, checks the config of a spec whose entrypoint
	// is a builtin (a tune spec's with a sample of its search space), for
	// a gang of minWorkers to maxWorkers (the spec's num_workers): the
	// binary that carries the builtins knows their settings. An error with
	// a ConfigKey() string method is reported at that key.
	CheckConfig func(builtin string, config []byte, minWorkers, maxWorkers int) error
	// CheckGridSearch, when set, says whether a tune block's searcher (its
	// search_alg type) takes grid_search in the config: an error says why
	// not, and is reported at each grid_search.
	CheckGridSearch func(searcher string) error
	// CheckScheduler, when set, checks a tune block's scheduler: its type,
	// its settings as a JSON object, and the tune block's metric ("" when
	// none). An error that has a SettingKey() string method is reported
	// at that setting; others at the scheduler block.
	CheckScheduler func(kind, metric string, settings []byte) error
	// CheckSearcher, when set, checks a tune block's search_alg in the
	// same way: its type, its settings as a JSON object, and the metric.
	CheckSearcher func(kind, metric string, settings []byte) error
	// Parser, when set, is the parser the spec and variable files are read
	// with, so that the caller can print diagnostics with source snippets
	// from Parser.Files(). Nil uses a fresh one.
	Parser *hclparse.Parser
}

var variableSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "type"},
		{Name: "default"},
		{Name: "description"},
	},
}

// variable is one declared variable "name" {} block.
type variable struct {
	name  string
	typ   cty.Type
	value cty.Value // cty.NilVal until a default or an outside value sets it
	decl  hcl.Range
}

// decodeVariables reads the variable blocks and the values given from
// outside, in Nomad's order of precedence (default, environment, var files,
// -var flags), and returns the "var" object for evaluation. A variable left
// without a value is reported and set to an unknown value so that its uses
// raise no further errors.
func decodeVariables(blocks hcl.Blocks, opts ParseOptions, parser *hclparse.Parser) (cty.Value, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	vars := map[string]*variable{}
	for _, b := range blocks {
		name := b.Labels[0]
		if !hclsyntax.ValidIdentifier(name) {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid variable name",
				Detail:   "A variable name must start with a letter or underscore and may contain only letters, digits, underscores and dashes.",
				Subject:  b.LabelRanges[0].Ptr(),
			})
			continue
		}
		if prev, ok := vars[name]; ok {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate variable",
				Detail:   fmt.Sprintf("A variable named %q was already declared at %s.", name, prev.decl),
				Subject:  b.DefRange.Ptr(),
			})
			continue
		}
		v, vdiags := decodeVariable(b)
		diags = append(diags, vdiags...)
		vars[name] = v
	}

	if opts.Getenv != nil {
		for _, name := range slices.Sorted(maps.Keys(vars)) {
			raw := opts.Getenv(EnvVarPrefix + name)
			if raw == "" {
				continue
			}
			addSource(parser, EnvVarPrefix+name, raw)
			v := vars[name]
			val, vdiags := rawVariableValue(v, raw, EnvVarPrefix+name)
			diags = append(diags, vdiags...)
			if !vdiags.HasErrors() {
				v.value = val
			}
		}
	}
	for _, path := range opts.VarFiles {
		diags = append(diags, applyVarFile(vars, path, parser)...)
	}
	for _, name := range slices.Sorted(maps.Keys(opts.Vars)) {
		addSource(parser, "-var "+name, opts.Vars[name])
		v, ok := vars[name]
		if !ok {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Undeclared variable",
				Detail:   fmt.Sprintf("A value for variable %q was given with -var, but the spec declares no variable %q.%s", name, name, suggest(name, slices.Sorted(maps.Keys(vars)))),
				Subject:  cliRange("-var " + name).Ptr(),
			})
			continue
		}
		val, vdiags := rawVariableValue(v, opts.Vars[name], "-var "+name)
		diags = append(diags, vdiags...)
		if !vdiags.HasErrors() {
			v.value = val
		}
	}

	obj := make(map[string]cty.Value, len(vars))
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		v := vars[name]
		if v.value == cty.NilVal {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "No value for variable",
				Detail: fmt.Sprintf("Variable %q has no default. Set it with -var %s=..., in a -var-file, or with the environment variable %s%s.",
					name, name, EnvVarPrefix, name),
				Subject: v.decl.Ptr(),
			})
			v.value = cty.UnknownVal(v.typ)
		}
		obj[name] = v.value
	}
	return cty.ObjectVal(obj), diags
}

func decodeVariable(b *hcl.Block) (*variable, hcl.Diagnostics) {
	v := &variable{name: b.Labels[0], typ: cty.DynamicPseudoType, decl: b.DefRange}
	content, diags := b.Body.Content(variableSchema)
	if attr, ok := content.Attributes["type"]; ok {
		ty, tdiags := typeexpr.TypeConstraint(attr.Expr)
		diags = append(diags, tdiags...)
		if !tdiags.HasErrors() {
			v.typ = ty
		}
	}
	if attr, ok := content.Attributes["description"]; ok {
		val, ddiags := attr.Expr.Value(nil)
		diags = append(diags, ddiags...)
		if !ddiags.HasErrors() {
			if _, err := convert.Convert(val, cty.String); err != nil {
				diags = append(diags, typeError(attr, nil, err))
			}
		}
	}
	if attr, ok := content.Attributes["default"]; ok {
		// A default that is wrong is said so once: not also "no default".
		v.value = cty.UnknownVal(v.typ)
		val, ddiags := attr.Expr.Value(nil)
		diags = append(diags, ddiags...)
		if !ddiags.HasErrors() {
			cv, err := convert.Convert(val, v.typ)
			if err != nil {
				diags = append(diags, typeError(attr, nil, err))
			} else {
				v.value = cv
			}
		}
	}
	return v, diags
}

// rawVariableValue turns a value from the command line or the environment
// into the variable's type.
func rawVariableValue(v *variable, raw, source string) (cty.Value, hcl.Diagnostics) {
	if v.typ == cty.String || v.typ == cty.DynamicPseudoType {
		return cty.StringVal(raw), nil
	}
	expr, diags := hclsyntax.ParseExpression([]byte(raw), "<"+source+">", hcl.InitialPos)
	if !diags.HasErrors() {
		diags = checkLimits(expr)
	}
	var val cty.Value
	if !diags.HasErrors() {
		val, diags = expr.Value(nil)
	}
	var err error
	if !diags.HasErrors() {
		if val, err = convert.Convert(val, v.typ); err != nil {
			diags = diags.Append(&hcl.Diagnostic{Severity: hcl.DiagError, Summary: err.Error(), Subject: expr.Range().Ptr()})
		}
	}
	if !diags.HasErrors() {
		return val, diags
	}
	first := diags.Errs()[0].(*hcl.Diagnostic)
	rng := cliRange(source)
	if first.Subject != nil {
		rng = *first.Subject
	}
	return cty.NilVal, hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Invalid value for variable",
		Detail: fmt.Sprintf("The value %q given by %s is not a valid %s (a typed variable takes an HCL expression, such as 3 or [\"a\", \"b\"]): %s.",
			raw, source, typeexpr.TypeString(v.typ), strings.TrimSuffix(first.Summary, ".")),
		Subject: rng.Ptr(),
	}}
}

func applyVarFile(vars map[string]*variable, path string, parser *hclparse.Parser) hcl.Diagnostics {
	var (
		file  *hcl.File
		diags hcl.Diagnostics
	)
	if strings.HasSuffix(path, ".json") {
		file, diags = parser.ParseJSONFile(path)
	} else {
		file, diags = parser.ParseHCLFile(path)
	}
	if diags.HasErrors() {
		return diags
	}
	if body, ok := file.Body.(*hclsyntax.Body); ok {
		if diags = append(diags, checkLimits(body)...); diags.HasErrors() {
			return diags
		}
	}
	attrs, adiags := file.Body.JustAttributes()
	diags = append(diags, adiags...)
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		attr := attrs[name]
		v, ok := vars[name]
		if !ok {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagWarning,
				Summary:  "Undeclared variable",
				Detail:   fmt.Sprintf("The var file sets %q, but the spec declares no such variable; the value is ignored.%s", name, suggest(name, slices.Sorted(maps.Keys(vars)))),
				Subject:  attr.NameRange.Ptr(),
			})
			continue
		}
		val, vdiags := attr.Expr.Value(nil)
		diags = append(diags, vdiags...)
		if vdiags.HasErrors() {
			continue
		}
		cv, err := convert.Convert(val, v.typ)
		if err != nil {
			diags = append(diags, typeError(attr, nil, err))
			continue
		}
		v.value = cv
	}
	return diags
}

// addSource gives the parser, when there is one, a value given with -var
// or in the environment as the text of the source its diagnostics name,
// so that they show it as they show a file's line (they said "source code
// not available").
func addSource(parser *hclparse.Parser, source, raw string) {
	if parser != nil {
		parser.AddFile("<"+source+">", &hcl.File{Bytes: []byte(raw)})
	}
}

// cliRange is the range diagnostics about command-line values point at.
func cliRange(source string) hcl.Range {
	return hcl.Range{
		Filename: "<" + source + ">",
		Start:    hcl.InitialPos,
		End:      hcl.InitialPos,
	}
}
