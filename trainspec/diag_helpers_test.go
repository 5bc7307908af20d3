package trainspec

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
)

// diagLines renders diagnostics one a line as
// "file:line:col-line:col: severity: summary; detail" for exact assertions.
func diagLines(diags hcl.Diagnostics) []string {
	out := make([]string, 0, len(diags))
	for _, d := range diags {
		sev := "error"
		if d.Severity == hcl.DiagWarning {
			sev = "warning"
		}
		where := "-"
		if r := d.Subject; r != nil {
			where = fmt.Sprintf("%s:%d:%d-%d:%d", r.Filename, r.Start.Line, r.Start.Column, r.End.Line, r.End.Column)
		}
		out = append(out, fmt.Sprintf("%s: %s: %s; %s", where, sev, d.Summary, d.Detail))
	}
	return out
}
