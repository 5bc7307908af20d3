package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

func TestVersionOf(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}}
	must.Eq(t, "v0.3.0 (abc123) go1.26.0", versionOf(info))
	must.StrHasPrefix(t, "(devel) go", versionOf(nil))
}

// The built binary answers -version on stdout and exits 0 instead of
// starting the plugin server.
func TestVersionFlag(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nomad-driver-train")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	for _, arg := range []string{"version", "-version"} {
		t.Run(arg, func(t *testing.T) {
			out, err := exec.Command(bin, arg).Output()
			must.NoError(t, err)
			must.StrHasPrefix(t, "nomad-driver-train ", string(out))
			must.True(t, strings.Contains(string(out), " go1."))
		})
	}
}
