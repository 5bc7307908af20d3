package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/builtins"
	"github.com/nomad-train/nomad-train/internal/cliflag"
	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainspec"
)

// Exit codes of the spec commands.
const (
	exitOK    = cliflag.ExitOK
	exitSpec  = 1 // the spec has errors, or fmt -check found unformatted files
	exitUsage = cliflag.ExitUsage
)

// fail reports err as the command's error and returns exit code 1.
func fail(stderr io.Writer, command string, err error) int {
	fmt.Fprintf(stderr, "nomad-train %s: %v\n", command, err)
	return 1
}

// The flag helpers every command uses (internal/cliflag).
var (
	newFlagSet = cliflag.NewSet
	parseFlags = cliflag.Parse
	parseArgs  = cliflag.ParseOne
)

func init() {
	register("validate", "Check a train.hcl spec and report every error", runValidate)
	register("fmt", "Rewrite train.hcl files in canonical format", runFmt)
}

// specFlags are the flags every command that reads a spec takes.
type specFlags struct {
	vars     cliflag.Vars
	varFiles cliflag.List
	// noAddress: validate with no Nomad address in sight, so warnings that
	// matter only once the spec goes to Nomad are left out.
	noAddress bool
}

func (f *specFlags) register(fs *flag.FlagSet) {
	f.vars = cliflag.Vars{}
	fs.Var(f.vars, "var", "set a variable: -var name=value (repeatable)")
	fs.Var(&f.varFiles, "var-file", "read variables from an HCL file (repeatable)")
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
	return console.LoadSpec(path, f.load(command, forNomad), stderr)
}

// load is how console.LoadSpec reads a spec with these flags.
func (f *specFlags) load(command string, forNomad bool) console.SpecLoad {
	return console.SpecLoad{Command: command, ForNomad: forNomad, NoAddress: f.noAddress,
		Parse: trainspec.ParseOptions{Vars: f.vars, VarFiles: f.varFiles, Getenv: os.Getenv,
			Builtins: builtins.Names(), CheckConfig: builtins.CheckConfig,
			CheckScheduler: tune.CheckScheduler, CheckSearcher: tune.CheckSearcher, CheckGridSearch: tune.CheckGridSearch}}
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
	fmt.Fprintf(stdout, "%s: train %q is valid (%s)\n", path, spec.Name, spec.Scaling.Workers())
	if spec.Tune != nil {
		fmt.Fprintf(stdout, "    an experiment: %s; run it with nomad-train tune\n", tuneSummary(spec))
	}
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
	if !(console.Fmt{Check: *check, Write: *write, Stdin: fmtStdin}).Run(paths, stdout, stderr) {
		return exitSpec
	}
	return exitOK
}

// fmtStdin is what fmt reads for "-"; tests replace it.
var fmtStdin io.Reader = os.Stdin

// tuneSummary says what a tune block asks for: "8 samples (random), 2 at a
// time, asha scheduler, ranked by loss (min), a 2h budget", or "8 trials (2
// samples of a grid of 4, random), ..." where a grid multiplies them.
func tuneSummary(spec *trainspec.Spec) string {
	t := spec.Tune
	samples := english.Count(t.NumSamples, "sample", "samples")
	if t.NumSamples == trainspec.UnlimitedSamples {
		samples = "samples until the budget is spent"
	}
	if x, err := tune.FromSpec(spec); err == nil {
		if n, err := x.Trials(); err == nil && n > t.NumSamples && t.NumSamples > 0 {
			samples = fmt.Sprintf("%s (%s of a grid of %d", english.Count(n, "trial", "trials"), samples, n/t.NumSamples)
			return summaryParts(t, samples+", "+t.SearchAlg.Type+")")
		}
	}
	return summaryParts(t, fmt.Sprintf("%s (%s)", samples, t.SearchAlg.Type))
}

// summaryParts is tuneSummary's text after the trials it says.
func summaryParts(t *trainspec.Tune, trials string) string {
	parts := []string{trials, fmt.Sprintf("%d at a time", t.MaxConcurrentTrials),
		t.Scheduler.Type + " scheduler"}
	if t.Metric != "" {
		parts = append(parts, fmt.Sprintf("ranked by %s (%s)", t.Metric, t.Mode))
	}
	if t.TimeBudget > 0 {
		parts = append(parts, "a "+trainspec.FormatDuration(t.TimeBudget)+" budget")
	}
	return strings.Join(parts, ", ")
}
