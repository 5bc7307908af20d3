package main

import (
	"testing"

	"github.com/shoenig/test/must"
)

// A run named with an underscore validates and compiles; its services are
// DNS labels.
func TestUnderscoreRunName(t *testing.T) {
	path := writeFile(t, t.TempDir(), "train.hcl", "train \"my_run\" {\n  entrypoint { builtin = \"quickstart\" }\n}\n")
	code, _, errOut := runCLI(t, "validate", path)
	must.Eq(t, 0, code, must.Sprint(errOut))
	code, out, errOut := runCLI(t, "compile", path)
	must.Eq(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, `"my-run-worker"`)
	must.StrContains(t, out, `"my-run-metrics"`)
	must.StrNotContains(t, out, `"my_run-`)
}
