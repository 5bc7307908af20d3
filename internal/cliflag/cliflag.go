// Package cliflag holds the flag helpers the nomad-train commands share:
// flag sets that report and do not exit, flags between positional
// arguments, and repeatable flags.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit codes of a command whose flags did not parse.
const (
	ExitOK    = 0 // -h
	ExitUsage = 2
)

// Vars collects repeated -var name=value flags.
type Vars map[string]string

func (v Vars) String() string { return "" }

// Set adds one name=value.
func (v Vars) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("-var wants name=value, got %q", s)
	}
	v[name] = value
	return nil
}

// List collects a repeated string flag.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

// Set adds one value.
func (l *List) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// NewSet is a flag set for `nomad-train <usage>` that reports to stderr
// and does not exit.
func NewSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: nomad-train %s\n\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses flags placed before, between or after the positional
// arguments (Go's flag package stops at the first positional one) and
// returns the positional arguments. code is -1 when parsing succeeded,
// else the exit code (ExitOK for -h).
func Parse(fs *flag.FlagSet, args []string) (positional []string, code int) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, ExitOK
			}
			return nil, ExitUsage
		}
		if fs.NArg() == 0 {
			return positional, -1
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// ParseOne is Parse for a command that wants exactly one spec file.
func ParseOne(fs *flag.FlagSet, args []string, stderr io.Writer) (string, int) {
	positional, code := Parse(fs, args)
	if code >= 0 {
		return "", code
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "nomad-train %s: want one spec file, got %d arguments\n", fs.Name(), len(positional))
		fs.Usage()
		return "", ExitUsage
	}
	return positional[0], -1
}
