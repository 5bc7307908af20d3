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

// An inner block left open is reported where it opens, not at the
// outer block the parser blames.
func TestUnclosedInnerBlock(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
	}{
		{"inner", "train \"x\" {\n  entrypoint {\n    builtin = \"quickstart\"\n  config = { epochs = 2 }\n}\n", 2},
		{"deeper", "train \"x\" {\n  entrypoint { builtin = \"quickstart\" }\n  scaling {\n    num_workers = 2\n    resources_per_worker {\n      cpu = 1\n  }\n}\n", 5},
		{"outer", "train \"x\" {\n  entrypoint { builtin = \"quickstart\" }\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := Parse([]byte(tc.src), "t.hcl", ParseOptions{})
			must.True(t, diags.HasErrors())
			var found bool
			for _, d := range diags {
				if d.Summary == unclosedSummary {
					found = true
					must.Eq(t, tc.line, d.Subject.Start.Line, must.Sprint(d.Detail))
				}
			}
			must.True(t, found, must.Sprint(diags.Error()))
		})
	}
}
