package trainspec

import (
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/shoenig/test/must"
)

func TestSortDiagnostics(t *testing.T) {
	at := func(file string, line int) *hcl.Range {
		return &hcl.Range{Filename: file, Start: hcl.Pos{Line: line, Column: 1}, End: hcl.Pos{Line: line, Column: 2}}
	}
	d := func(summary string, r *hcl.Range) *hcl.Diagnostic {
		return &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: summary, Subject: r}
	}
	got := SortDiagnostics(hcl.Diagnostics{
		d("nowhere", nil), d("b9", at("b.hcl", 9)), d("a7", at("a.hcl", 7)),
		d("a2", at("a.hcl", 2)), d("a7", at("a.hcl", 7)), d("nowhere", nil),
	})
	var summaries []string
	for _, g := range got {
		summaries = append(summaries, g.Summary)
	}
	must.Eq(t, []string{"a2", "a7", "b9", "nowhere"}, summaries)
}

func TestForLocalDropsNomadOnly(t *testing.T) {
	s := &Spec{Name: "x", Run: Run{StoragePath: "./results"}}
	_, diags := Compile(s)
	must.True(t, hasSummary(diags, "Relative storage path on Nomad"))
	must.False(t, hasSummary(ForLocal(diags), "Relative storage path on Nomad"))
}

func hasSummary(diags hcl.Diagnostics, summary string) bool {
	for _, d := range diags {
		if d.Summary == summary {
			return true
		}
	}
	return false
}
