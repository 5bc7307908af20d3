package main

import (
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, args...)
			must.Eq(t, exitOK, code, must.Sprint(stderr))
			must.StrHasPrefix(t, "nomad-train ", stdout)
			must.StrContains(t, stdout, " go1.")
		})
	}
}
