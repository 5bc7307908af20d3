package workerenv

import (
	"debug/buildinfo"
	"os/exec"
)

// TrainerModule is the module path a Go worker binary depends on.
const TrainerModule = "github.com/nomad-train/nomad-train"

// SpeaksContract reports whether the command speaks the worker contract
// itself, so that it runs without the external wrapper: a Go program built
// with this module. A command that cannot be found counts as speaking it,
// so starting it directly reports the real error.
func SpeaksContract(command string) bool {
	path, err := exec.LookPath(command)
	if err != nil {
		return true
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return false // not a Go binary: python3, a shell script, ...
	}
	if info.Main.Path == TrainerModule {
		return true
	}
	for _, d := range info.Deps {
		if d.Path == TrainerModule {
			return true
		}
	}
	return false
}
