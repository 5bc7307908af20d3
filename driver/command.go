package driver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrCommandNotAllowed is returned for a command outside the plugin's
// allowed_command_dirs.
var ErrCommandNotAllowed = errors.New("command is outside allowed_command_dirs")

// program is a command entrypoint found and checked.
type program struct {
	// Path is the file to execute. Under allowed_command_dirs it is the
	// file the check saw, every symlink resolved, so that replacing a
	// symlink after the check changes nothing.
	Path string
	// Name is the path as the job named it, the program's argv[0] (a
	// venv's python finds its venv through it, a multi-call binary its
	// role).
	Name string
}

// resolveCommand finds the program: a bare name through PATH, a relative
// path under the task dir. With allowed dirs it must lie under one of
// them after symlinks are resolved, and the resolved file is what runs.
func resolveCommand(cmd, taskDir, pathEnv string, allowed []string) (program, error) {
	var p string
	switch {
	case filepath.IsAbs(cmd):
		p = cmd
	case strings.ContainsRune(cmd, '/'):
		p = filepath.Join(taskDir, cmd)
	default:
		if pathEnv == "" {
			pathEnv = os.Getenv("PATH")
		}
		for _, dir := range filepath.SplitList(pathEnv) {
			if c := filepath.Join(dir, cmd); isExecutable(c) {
				p = c
				break
			}
		}
		if p == "" {
			return program{}, fieldErr("command", "%q not found in PATH", cmd)
		}
	}
	p = filepath.Clean(p)
	if !isExecutable(p) {
		return program{}, fieldErr("command", "%q is not an executable file", p)
	}
	if len(allowed) == 0 {
		return program{Path: p, Name: p}, nil
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return program{}, fieldErr("command", "resolve %q: %v", p, err)
	}
	if !isExecutable(real) {
		return program{}, fieldErr("command", "%q (%s) is not an executable file", p, real)
	}
	for _, dir := range allowed {
		if rd, err := filepath.EvalSymlinks(dir); err == nil {
			dir = rd
		}
		if rel, err := filepath.Rel(dir, real); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return program{Path: real, Name: p}, nil
		}
	}
	return program{}, fmt.Errorf("field %q: %w: %s", "command", ErrCommandNotAllowed, real)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
