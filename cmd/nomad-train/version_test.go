package main

import (
	"runtime/debug"
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

func TestVersionString(t *testing.T) {
	cases := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "(devel) "},
		{"devel with revision", &debug.BuildInfo{GoVersion: "go1.26.0",
			Main:     debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}},
			"(devel) (abc123) go1.26.0"},
		{"tagged module", &debug.BuildInfo{GoVersion: "go1.26.0",
			Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0 go1.26.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.StrHasPrefix(t, tc.want, versionString(tc.info))
		})
	}
}
