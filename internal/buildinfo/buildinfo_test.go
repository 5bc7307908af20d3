package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/shoenig/test/must"
)

func TestString(t *testing.T) {
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
			must.StrHasPrefix(t, tc.want, String(tc.info))
		})
	}
}
