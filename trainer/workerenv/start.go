package workerenv

import (
	"encoding/json"
	"errors"
	"fmt"
)

// WorkerArg is the first command-line argument that makes a binary which
// carries builtins (nomad-train, nomad-driver-train) run as a worker for
// the builtin named in Builtin.
const WorkerArg = "worker"

// ExternalBuiltin is the builtin that runs a program that does not speak
// the worker contract itself (python3 train.py, a shell script): the
// launching binary joins the rendezvous and runs the program with
// torchrun's environment (package trainer/external).
const ExternalBuiltin = "external"

// ExternalCommand holds, for ExternalBuiltin, the program to run as a JSON
// array (argv).
const ExternalCommand = "NOMAD_TRAIN_EXTERNAL_COMMAND"

// Launchers of a command entrypoint: how a program is started.
const (
	// LauncherAuto runs a Go trainer binary built with this module directly
	// and any other program under ExternalBuiltin (the default).
	LauncherAuto = "auto"
	// LauncherExternal always runs the program under ExternalBuiltin.
	LauncherExternal = "external"
	// LauncherDirect runs the program itself: it speaks the worker contract
	// on its own (a script that execs a Go trainer, say).
	LauncherDirect = "direct"
)

// Entrypoint is what a worker runs: a builtin of the launching binary, or a
// program with its arguments.
type Entrypoint struct {
	Builtin  string
	Command  string // the program, as the launcher will execute it
	Args     []string
	Launcher string // for a Command: LauncherAuto when empty
}

// Process is how to start one worker process.
type Process struct {
	// Path and Args are the executable and its arguments (without argv[0]).
	Path string
	Args []string
	// Env holds the contract variables this way of starting needs
	// (Builtin, ExternalCommand), as KEY=VALUE.
	Env []string
	// Self says Path is the launching binary, running a builtin or the
	// external wrapper.
	Self bool
	// External is the wrapped program's argv when Self runs it under
	// ExternalBuiltin; nil otherwise.
	External []string
}

// ErrNoEntrypoint is returned for an Entrypoint with neither a builtin nor
// a command.
var ErrNoEntrypoint = errors.New("entrypoint needs a builtin or a command")

// StartFor decides how to start a worker for ep, the one place that does:
// a builtin runs as self (the launching binary) with WorkerArg; a command
// runs directly, or under ExternalBuiltin when its launcher says so or,
// for LauncherAuto, when speaksContract(program) is false. speaksContract
// is consulted only for LauncherAuto (SpeaksContract reads
// the program's Go build information).
func StartFor(ep Entrypoint, self string, speaksContract func(program string) bool) (Process, error) {
	switch {
	case ep.Builtin != "" && ep.Command != "":
		return Process{}, errors.New("entrypoint has both a builtin and a command")
	case ep.Builtin == ExternalBuiltin:
		return Process{}, fmt.Errorf("builtin %q is how a command entrypoint runs; give the command itself (with launcher %q) instead", ExternalBuiltin, LauncherExternal)
	case ep.Builtin != "":
		return Process{Path: self, Args: []string{WorkerArg}, Env: []string{Builtin + "=" + ep.Builtin}, Self: true}, nil
	case ep.Command == "":
		return Process{}, ErrNoEntrypoint
	}
	wrap := false
	switch ep.Launcher {
	case "", LauncherAuto:
		wrap = !speaksContract(ep.Command)
	case LauncherExternal:
		wrap = true
	case LauncherDirect:
	default:
		return Process{}, fmt.Errorf("unknown launcher %q (want %s, %s or %s)", ep.Launcher, LauncherAuto, LauncherExternal, LauncherDirect)
	}
	if !wrap {
		return Process{Path: ep.Command, Args: ep.Args}, nil
	}
	argv := append([]string{ep.Command}, ep.Args...)
	js, err := json.Marshal(argv)
	if err != nil {
		return Process{}, fmt.Errorf("encode %s: %w", ExternalCommand, err)
	}
	return Process{Path: self, Args: []string{WorkerArg}, Self: true, External: argv,
		Env: []string{Builtin + "=" + ExternalBuiltin, ExternalCommand + "=" + string(js)}}, nil
}
