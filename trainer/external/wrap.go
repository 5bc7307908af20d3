package external

import (
	"debug/buildinfo"
	"os/exec"
)

// TrainerModule is the module path a Go worker binary depends on.
const TrainerModule = "github.com/nomad-train/nomad-train"

// NeedsWrapper reports whether the command must run under the external
// wrapper: true unless it is a Go program built with this module (which
// speaks the worker contract itself). A command that cannot be found is
// left alone, so starting it reports the real error.
func NeedsWrapper(command string) bool {
	path, err := exec.LookPath(command)
	if err != nil {
		return false
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return true // not a Go binary: python3, a shell script, ...
	}
	if info.Main.Path == TrainerModule {
		return false
	}
	for _, d := range info.Deps {
		if d.Path == TrainerModule {
			return false
		}
	}
	return true
}
