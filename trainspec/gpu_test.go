package trainspec

import (
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/shoenig/test/must"
)

// use_gpu with a builtin (which computes on the CPU) is a warning at the
// use_gpu attribute; with a command, or without use_gpu, nothing is said.
func TestGPUOnBuiltinWarns(t *testing.T) {
	cases := []struct {
		name, entrypoint, scaling string
		warn                      bool
	}{
		{"builtin with use_gpu", `builtin = "quickstart"`, "use_gpu = true", true},
		{"builtin without use_gpu", `builtin = "quickstart"`, "use_gpu = false", false},
		{"command with use_gpu", `command = "python3"`, "use_gpu = true", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := "train \"g\" {\n  entrypoint { " + tc.entrypoint + " }\n  scaling {\n    " + tc.scaling + "\n  }\n}\n"
			_, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
			if !tc.warn {
				must.SliceEmpty(t, diags)
				return
			}
			must.SliceLen(t, 1, diags)
			d := diags[0]
			must.Eq(t, hcl.DiagWarning, d.Severity)
			must.Eq(t, "GPUs reserved for a builtin that computes on the CPU", d.Summary)
			must.StrContains(t, d.Detail, `"quickstart"`)
			must.Eq(t, hcl.Range{Filename: "train.hcl", Start: hcl.Pos{Line: 4, Column: 5, Byte: 68}, End: hcl.Pos{Line: 4, Column: 19, Byte: 82}}, *d.Subject)
		})
	}
}
