package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

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
