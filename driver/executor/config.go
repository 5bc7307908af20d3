package executor

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// ShimArg is the first argument that makes the driver binary run as the
// supervisor shim. The driver's main calls ShimMain when os.Args[1] == ShimArg.
const ShimArg = "executor-shim"

// Config describes one task to run. It is JSON-serialisable and is kept,
// inside State, in Nomad's driver_state so that a recovered task can still
// Exec in the task's environment.
type Config struct {
	// TaskID is Nomad's task id; used in log lines and file names only.
	TaskID string
	// Command is the program to run: an absolute path, a path relative to
	// Dir, or a bare name looked up in the PATH of Env (then of the plugin).
	Command string
	// Argv0 is the program name the worker sees as argv[0]; "" is Command.
	Argv0 string
	// Args are the arguments after the program name.
	Args []string
	// Env is the task's whole environment, as KEY=VALUE.
	Env []string
	// Dir is the working directory; "" means StateDir's parent.
	Dir string
	// User is the user name (or numeric uid) to run as; "" is the current user.
	User string
	// StdoutPath and StderrPath are the FIFOs (or regular files) that
	// receive the task's output; "" means /dev/null.
	StdoutPath, StderrPath string
	// StateDir holds the shim's spec, exit and log files. It is created if
	// missing (mode 0700) and removed by Destroy; one that is a link or
	// not the plugin's own is refused (statedir.go).
	StateDir string
	// CgroupPath is a cgroup v2 directory to create for the task; "" = none.
	CgroupPath string
	// CPUShares is Nomad's CPU reservation in MHz; mapped to cpu.weight.
	CPUShares int64
	// MemoryMB is the memory reservation (memory.low); MemoryMaxMB the hard
	// limit (memory.max). When MemoryMaxMB is 0, MemoryMB is the hard limit.
	MemoryMB, MemoryMaxMB int64
	// ShimPath is the executable re-executed as the shim (the driver passes
	// os.Executable(); tests pass os.Args[0]).
	ShimPath string
	// ShimEnv is extra environment for the shim process itself.
	ShimEnv []string
}

// ConfigError is a Config that cannot be run. Field names the offending
// Config field. Config errors are not recoverable: retrying cannot help.
type ConfigError struct {
	Field string
	Err   error
}

// Error implements error.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("invalid task config: %s: %v", e.Field, e.Err)
}

// Unwrap returns the cause.
func (e *ConfigError) Unwrap() error { return e.Err }

// Sentinel causes found inside ConfigError and other errors.
var (
	// ErrCommandNotFound: the command does not exist or is not executable.
	ErrCommandNotFound = errors.New("command not found")
	// ErrUnknownUser: the user name does not resolve.
	ErrUnknownUser = errors.New("unknown user")
	// ErrNotPermitted: running as another user needs root.
	ErrNotPermitted = errors.New("running as another user needs root")
)

func configErr(field string, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}

// UserLookup resolves a user name to a user record; os/user.Lookup is the
// default. Tests inject their own.
type UserLookup func(name string) (*user.User, error)

// credential is the resolved identity the worker runs as.
type credential struct {
	UID, GID uint32
	Groups   []uint32
	Home     string
	Name     string
}

// resolved is a validated Config ready for the shim: absolute paths, resolved
// command and identity.
type resolved struct {
	Path string      // absolute path of the command
	Dir  string      // absolute working directory
	Cred *credential // nil: run as the shim's own user
}

// validate checks cfg and resolves the command, directory and user. It does
// no writes. uid is the plugin's effective uid.
func validate(cfg *Config, lookup UserLookup, uid int) (resolved, error) {
	var r resolved
	if cfg.TaskID == "" {
		return r, configErr("TaskID", "must not be empty")
	}
	if cfg.StateDir == "" {
		return r, configErr("StateDir", "must not be empty")
	}
	if cfg.ShimPath == "" {
		return r, configErr("ShimPath", "must not be empty")
	}
	// The shim starts in "/", where a relative path would mean something
	// else.
	abs, err := filepath.Abs(cfg.ShimPath)
	if err != nil {
		return r, &ConfigError{Field: "ShimPath", Err: err}
	}
	cfg.ShimPath = abs
	if cfg.Command == "" {
		return r, configErr("Command", "must not be empty")
	}
	for i, kv := range cfg.Env {
		if !strings.Contains(kv, "=") {
			return r, configErr("Env", "entry %d %q is not KEY=VALUE", i, kv)
		}
	}
	if cfg.MemoryMB < 0 || cfg.MemoryMaxMB < 0 || cfg.CPUShares < 0 {
		return r, configErr("MemoryMB", "resources must not be negative")
	}
	if cfg.CgroupPath != "" && !filepath.IsAbs(cfg.CgroupPath) {
		return r, configErr("CgroupPath", "%q is not absolute", cfg.CgroupPath)
	}
	if r.Dir, r.Cred, err = environment(cfg, lookup, uid); err != nil {
		return r, err
	}
	r.Path, err = lookCommand(cfg.Command, r.Dir, cfg.Env)
	if err != nil {
		return r, &ConfigError{Field: "Command", Err: err}
	}
	return r, nil
}

// environment resolves the working directory and identity of cfg, shared
// by the task and the commands Exec runs in it.
func environment(cfg *Config, lookup UserLookup, uid int) (string, *credential, error) {
	dir := cfg.Dir
	if dir == "" {
		dir = filepath.Dir(filepath.Clean(cfg.StateDir))
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", nil, &ConfigError{Field: "Dir", Err: err}
	}
	if fi, err := os.Stat(dir); err != nil {
		return "", nil, &ConfigError{Field: "Dir", Err: err}
	} else if !fi.IsDir() {
		return "", nil, configErr("Dir", "%s is not a directory", dir)
	}
	cred, err := resolveUser(cfg.User, lookup, uid)
	if err != nil {
		return "", nil, &ConfigError{Field: "User", Err: err}
	}
	return dir, cred, nil
}

// lookCommand finds the executable: paths with a slash are taken relative to
// dir; bare names are searched in the task's PATH, then the plugin's.
func lookCommand(cmd, dir string, env []string) (string, error) {
	if strings.Contains(cmd, "/") {
		p := cmd
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("%s: %w", cmd, err)
		}
		return p, nil
	}
	path := envValue(env, "PATH")
	if path == "" {
		path = os.Getenv("PATH")
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, cmd)
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w in PATH", cmd, ErrCommandNotFound)
}

func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ErrCommandNotFound
		}
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not an executable file: %w", ErrCommandNotFound)
	}
	return nil
}

// envValue returns the last value of key in a KEY=VALUE list.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// resolveUser maps a user name to a credential. "" or the current user
// needs no switch (nil). Another user needs root.
func resolveUser(name string, lookup UserLookup, uid int) (*credential, error) {
	if name == "" {
		return nil, nil
	}
	u, err := lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("%q: %w", name, ErrUnknownUser)
		}
		return nil, fmt.Errorf("look up user %q: %w", name, err)
	}
	id, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q has non-numeric uid %q", name, u.Uid)
	}
	if int(id) == uid {
		return nil, nil
	}
	if uid != 0 {
		return nil, fmt.Errorf("user %q (uid %d) while the plugin runs as uid %d: %w", name, id, uid, ErrNotPermitted)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q has non-numeric gid %q", name, u.Gid)
	}
	c := &credential{UID: uint32(id), GID: uint32(gid), Home: u.HomeDir, Name: u.Username}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				c.Groups = append(c.Groups, uint32(n))
			}
		}
	}
	return c, nil
}
