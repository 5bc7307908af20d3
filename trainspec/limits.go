package trainspec

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// Binary exponents of the largest and smallest non-zero float64 values.
const (
	maxNumberExp = 1024
	minNumberExp = -1074
)

// checkLimits keeps the cost of evaluating a spec proportional to its size.
// It reports:
//   - number literals outside float64's range. HCL numbers are
//     arbitrary-precision, and turning one such as 1e99999999 into text (for
//     JSON or a template) writes every digit: a few bytes of spec would cost
//     gigabytes;
//   - for expressions nested in for expressions, whose results grow as the
//     product of their inputs.
//
// Bounding these bounds every value an expression can build, since a spec
// has no other way to repeat work.
func checkLimits(node hclsyntax.Node) hcl.Diagnostics {
	w := &limitWalker{}
	_ = hclsyntax.Walk(node, w)
	return w.diags
}

type limitWalker struct {
	forDepth int
	diags    hcl.Diagnostics
}

func (w *limitWalker) Enter(n hclsyntax.Node) hcl.Diagnostics {
	switch n := n.(type) {
	case *hclsyntax.ForExpr:
		w.forDepth++
		if w.forDepth == 2 {
			w.diags = append(w.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Nested for expression",
				Detail:   "A for expression may not contain another: the result would grow with the product of the inputs.",
				Subject:  n.SrcRange.Ptr(),
			})
		}
	case *hclsyntax.LiteralValueExpr:
		if n.Val.Type() != cty.Number || n.Val.IsNull() || !n.Val.IsKnown() {
			return nil
		}
		bf := n.Val.AsBigFloat()
		if bf.Sign() == 0 || bf.IsInf() {
			return nil
		}
		if exp := bf.MantExp(nil); exp > maxNumberExp || exp < minNumberExp {
			w.diags = append(w.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Number out of range",
				Detail:   "Numbers must be within the range of a 64-bit float (about 1e-308 to 1e308).",
				Subject:  n.SrcRange.Ptr(),
			})
		}
	}
	return nil
}

func (w *limitWalker) Exit(n hclsyntax.Node) hcl.Diagnostics {
	if _, ok := n.(*hclsyntax.ForExpr); ok {
		w.forDepth--
	}
	return nil
}
