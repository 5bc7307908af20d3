package trainspec

import (
	"cmp"
	"slices"

	"github.com/hashicorp/hcl/v2"
)

// needsAddress marks a diagnostic that concerns only a spec bound for a
// Nomad cluster: a plain local validate (no Nomad address) leaves it out.
type needsAddress struct{}

// NeedsAddress is the Extra of a diagnostic that matters only when the
// spec is sent to Nomad (a relative storage path is fine for a local run).
var NeedsAddress any = needsAddress{}

// ForLocal is diags without those that matter only on Nomad.
func ForLocal(diags hcl.Diagnostics) hcl.Diagnostics {
	return slices.DeleteFunc(slices.Clone(diags), func(d *hcl.Diagnostic) bool {
		_, ok := d.Extra.(needsAddress)
		return ok
	})
}

// SortDiagnostics orders diags by file, then line and column (those
// without a place last, in their order), and drops exact repeats: a
// reader fixes a spec top to bottom.
func SortDiagnostics(diags hcl.Diagnostics) hcl.Diagnostics {
	out := make(hcl.Diagnostics, 0, len(diags))
	for _, d := range diags {
		if !slices.ContainsFunc(out, func(o *hcl.Diagnostic) bool { return sameDiagnostic(o, d) }) {
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b *hcl.Diagnostic) int {
		switch {
		case a.Subject == nil && b.Subject == nil:
			return 0
		case a.Subject == nil:
			return 1
		case b.Subject == nil:
			return -1
		}
		return cmp.Or(cmp.Compare(a.Subject.Filename, b.Subject.Filename),
			cmp.Compare(a.Subject.Start.Line, b.Subject.Start.Line),
			cmp.Compare(a.Subject.Start.Column, b.Subject.Start.Column))
	})
	return out
}

func sameDiagnostic(a, b *hcl.Diagnostic) bool {
	if a.Severity != b.Severity || a.Summary != b.Summary || a.Detail != b.Detail {
		return false
	}
	if a.Subject == nil || b.Subject == nil {
		return a.Subject == b.Subject
	}
	return *a.Subject == *b.Subject
}
