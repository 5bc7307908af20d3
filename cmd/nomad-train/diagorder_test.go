package main

import (
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// nomadWarnings is a spec that compiles with several warnings, written so
// that Compile raises them out of line order.
const nomadWarnings = `train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_workers = 2
    trainer_resources { cpu = 1 }
  }
  run { storage_path = "./results" }
  rendezvous { backend = "embedded" }
}
`

// validate prints each warning once, with its file:line, in line order;
// the relative storage path warning only when a Nomad address is set.
func TestValidateWarningsOrderedAndPlaced(t *testing.T) {
	path := writeFile(t, t.TempDir(), "train.hcl", nomadWarnings)
	for _, tc := range []struct {
		name, addr string
		want       []string // in this order
		absent     string
	}{
		{"with address", "http://127.0.0.1:4646",
			[]string{"trainer_resources reserve nothing", "line 5", "Relative storage path", "line 7", "Embedded rendezvous", "line 8"}, ""},
		{"local", "",
			[]string{"trainer_resources reserve nothing", "line 5", "Embedded rendezvous", "line 8"}, "Relative storage path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NOMAD_ADDR", tc.addr)
			code, _, errOut := runCLI(t, "validate", path)
			must.Eq(t, 0, code, must.Sprint(errOut))
			rest := errOut
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				must.NonNegative(t, i, must.Sprintf("%q not after the previous in:\n%s", w, errOut))
				rest = rest[i+len(w):]
			}
			must.Eq(t, 1, strings.Count(errOut, "trainer_resources reserve nothing"), must.Sprint(errOut))
			if tc.absent != "" {
				must.StrNotContains(t, errOut, tc.absent)
			}
		})
	}
}
