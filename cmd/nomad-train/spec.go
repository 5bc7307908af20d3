package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/builtins"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainspec"
)

// Exit codes of the spec commands.
const (
	exitOK    = 0
	exitSpec  = 1 // the spec has errors, or fmt -check found unformatted files
	exitUsage = 2
)

func init() {
	register("validate", "Check a train.hcl spec and report every error", runValidate)
	register("fmt", "Rewrite train.hcl files in canonical format", runFmt)
}

// varFlags collects repeated -var name=value flags.
type varFlags map[string]string

func (v varFlags) String() string { return "" }

func (v varFlags) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("-var wants name=value, got %q", s)
	}
	v[name] = value
	return nil
}

// listFlag collects a repeated string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// specFlags are the flags every command that reads a spec takes.
type specFlags struct {
	vars     varFlags
	varFiles listFlag
	// noAddress: validate with no Nomad address in sight, so warnings that
	// matter only once the spec goes to Nomad are left out.
	noAddress bool
}

func (f *specFlags) register(fs *flag.FlagSet) {
	f.vars = varFlags{}
	fs.Var(f.vars, "var", "set a variable: -var name=value (repeatable)")
	fs.Var(&f.varFiles, "var-file", "read variables from an HCL file (repeatable)")
}

// newFlagSet is a flag set that reports to stderr and does not exit.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: nomad-train %s\n\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses flags placed before, between or after the positional
// arguments (Go's flag package stops at the first positional one) and
// returns the positional arguments. code is -1 when parsing succeeded.
func parseFlags(fs *flag.FlagSet, args []string) (positional []string, code int) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK
			}
			return nil, exitUsage
		}
		if fs.NArg() == 0 {
			return positional, -1
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// parseArgs parses flags and wants exactly one spec path.
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (string, int) {
	positional, code := parseFlags(fs, args)
	if code >= 0 {
		return "", code
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "nomad-train %s: want one spec file, got %d arguments\n", fs.Name(), len(positional))
		fs.Usage()
		return "", exitUsage
	}
	return positional[0], -1
}

// loadSpec parses the spec at path and, with forNomad, compiles it into a
// Nomad job (whose warnings are about Nomad, e.g. a relative storage path),
// printing diagnostics (with source snippets) to stderr. The rendered job is
// nil when there were errors or forNomad is false.
func loadSpec(path string, f *specFlags, forNomad bool, stderr io.Writer) (*trainspec.Spec, *api.Job, bool) {
	return loadSpecFor("", path, f, forNomad, stderr)
}

// loadSpecFor is loadSpec for a command that trains the spec's config
// once (run, compile): it refuses an experiment (a tune block).
func loadSpecFor(command, path string, f *specFlags, forNomad bool, stderr io.Writer) (*trainspec.Spec, *api.Job, bool) {
	parser := hclparse.NewParser()
	spec, diags := trainspec.ParseFile(path, trainspec.ParseOptions{
		Vars:        f.vars,
		VarFiles:    f.varFiles,
		Getenv:      os.Getenv,
		Builtins:    builtins.Names(),
		CheckConfig: builtins.CheckConfig,
		CheckScheduler: func(kind, metric string, settings []byte) error {
			_, err := tune.ParseScheduler(kind, settings, metric)
			return err
		},
		CheckSearcher: func(kind, metric string, settings []byte) error {
			_, err := tune.ParseSearcher(kind, settings, metric)
			return err
		},
		Parser: parser,
	})
	if command != "" && !diags.HasErrors() {
		diags = append(diags, trainspec.OneRun(spec, command)...)
	}
	var job *api.Job
	if forNomad && !diags.HasErrors() {
		var cdiags hcl2.Diagnostics
		job, cdiags = trainspec.Compile(spec)
		if f.noAddress {
			cdiags = trainspec.ForLocal(cdiags)
		}
		diags = append(diags, cdiags...)
	}
	printDiagnostics(stderr, parser, diags)
	return spec, job, !diags.HasErrors()
}

func printDiagnostics(w io.Writer, parser *hclparse.Parser, diags hcl2.Diagnostics) {
	if len(diags) == 0 {
		return
	}
	diags = trainspec.SortDiagnostics(diags)
	tw := hcl2.NewDiagnosticTextWriter(w, parser.Files(), 78, false)
	_ = tw.WriteDiagnostics(diags) // best effort: the exit code carries the outcome
	if n := len(diags.Errs()); n > 0 {
		fmt.Fprintf(w, "%d error(s)\n", n)
	}
}

func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", "validate [-var name=value] [-var-file file] <train.hcl>", stderr)
	var sf specFlags
	sf.register(fs)
	path, code := parseArgs(fs, args, stderr)
	if code >= 0 {
		return code
	}
	sf.noAddress = os.Getenv("NOMAD_ADDR") == ""
	spec, _, ok := loadSpec(path, &sf, true, stderr)
	if !ok {
		return exitSpec
	}
	fmt.Fprintf(stdout, "%s: train %q is valid (%s)\n", path, spec.Name, workers(spec.Scaling.NumWorkers))
	if note := trainspec.StorageNote(spec); note != "" {
		fmt.Fprintf(stdout, "    %s\n", note)
	}
	return exitOK
}

func runFmt(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("fmt", "fmt [-check | -write] <file | dir | ->...\n\nWithout a flag, prints each file formatted. A directory means every *.hcl file\nbelow it; - reads standard input and writes the result to standard output.", stderr)
	check := fs.Bool("check", false, "list files that are not formatted and exit 1 if any")
	write := fs.Bool("write", false, "rewrite files in place and list those changed")
	paths, code := parseFlags(fs, args)
	if code >= 0 {
		return code
	}
	if *check && *write {
		fmt.Fprintln(stderr, "nomad-train fmt: -check and -write exclude each other")
		return exitUsage
	}
	if len(paths) == 0 {
		fmt.Fprintln(stderr, "nomad-train fmt: want at least one file")
		fs.Usage()
		return exitUsage
	}
	sort.Strings(paths)
	paths, err := expandFmtPaths(paths)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train fmt: %v\n", err)
		return exitSpec
	}
	code = exitOK
	parser := hclparse.NewParser()
	for _, path := range paths {
		src, err := readFmtSource(path)
		if err != nil {
			fmt.Fprintf(stderr, "nomad-train fmt: %v\n", err)
			code = exitSpec
			continue
		}
		out, diags := trainspec.Format(src, path)
		if diags.HasErrors() {
			parser.AddFile(path, &hcl2.File{Bytes: src})
			printDiagnostics(stderr, parser, diags)
			code = exitSpec
			continue
		}
		changed := !bytes.Equal(src, out)
		switch {
		case *check:
			if changed {
				fmt.Fprintln(stdout, path)
				code = exitSpec
			}
		case *write && path != stdinPath: // "-" has no file to rewrite: print it
			if changed {
				if err := os.WriteFile(path, out, 0o644); err != nil {
					fmt.Fprintf(stderr, "nomad-train fmt: %v\n", err)
					code = exitSpec
					continue
				}
				fmt.Fprintln(stdout, path)
			}
		default:
			if _, err := stdout.Write(out); err != nil {
				fmt.Fprintf(stderr, "nomad-train fmt: %v\n", err)
				return exitSpec
			}
		}
	}
	return code
}
