package workerenv

import (
	"os"
	"os/exec"
	"testing"

	"github.com/shoenig/test/must"
)

// Go binaries built with this module run as they are; anything else is
// wrapped.
func TestSpeaksContract(t *testing.T) {
	exe, err := os.Executable() // this test binary depends on the module
	must.NoError(t, err)
	must.True(t, SpeaksContract(exe))
	sh, err := exec.LookPath("sh")
	must.NoError(t, err)
	must.False(t, SpeaksContract(sh))
	must.True(t, SpeaksContract("no-such-command-here"))
}
