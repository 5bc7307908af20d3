package console

import (
	"fmt"
	"io"
	"os"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/trainspec"
)

// SpecLoad says how LoadSpec reads a spec.
type SpecLoad struct {
	// Parse are the parser's options (variables, builtins, checks); its
	// Parser is LoadSpec's own.
	Parse trainspec.ParseOptions
	// Command, when set, is a command that trains the spec's config once
	// (run, compile): an experiment (a tune block) is refused.
	Command string
	// ForNomad compiles the spec into a Nomad job; NoAddress leaves out the
	// warnings that matter only once the job goes to Nomad.
	ForNomad, NoAddress bool
}

// LoadSpec parses the spec at path and, with ForNomad, compiles it into a
// Nomad job, printing every diagnostic (with its source snippet) to
// stderr. The job is nil when there were errors or ForNomad is false; ok
// is false when there were errors.
func LoadSpec(path string, l SpecLoad, stderr io.Writer) (spec *trainspec.Spec, job *api.Job, ok bool) {
	parser := hclparse.NewParser()
	opts := l.Parse
	opts.Parser = parser
	spec, diags := trainspec.ParseFile(path, opts)
	if l.Command != "" && !diags.HasErrors() {
		diags = append(diags, trainspec.OneRun(spec, l.Command)...)
	}
	if l.ForNomad && !diags.HasErrors() {
		var cdiags hcl2.Diagnostics
		job, cdiags = trainspec.Compile(spec)
		if l.NoAddress {
			cdiags = trainspec.ForLocal(cdiags)
		}
		diags = append(diags, cdiags...)
	}
	PrintDiagnostics(stderr, parser, diags)
	return spec, job, !diags.HasErrors()
}

// PrintDiagnostics prints diags in source order with their snippets, and
// the number of errors.
func PrintDiagnostics(w io.Writer, parser *hclparse.Parser, diags hcl2.Diagnostics) {
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

// PrintSecretHint tells how to create the run secret's Variable, which
// `nomad-train run -address` writes itself but `nomad job run` does not:
// the job's template holds the workers until it exists. The secret never
// goes into the job, so this goes to stderr, not into the output.
func PrintSecretHint(w io.Writer, job *api.Job) {
	fmt.Fprintf(w, "==> Before `nomad job run`, store the run secret the workers authenticate with\n"+
		"    (Nomad holds them until the Variable %s exists):\n\n    %s\n\n",
		trainspec.SecretVariablePath(*job.ID), trainspec.SecretCommand(job))
	if c := trainspec.S3CredentialsCommand(job); c != "" {
		fmt.Fprintf(w, "==> and the S3 keys the workers read (AWS_* from your environment here;\n"+
			"    Nomad holds them until the Variable exists):\n\n    %s\n\n", c)
	}
}

// WriteJob writes job as Nomad HCL, or as JSON ({"Job": ...}) with asJSON,
// to the file out, or to stdout when out is "".
func WriteJob(job *api.Job, asJSON bool, out string, stdout io.Writer) error {
	b := trainspec.RenderHCL(job)
	if asJSON {
		var err error
		if b, err = trainspec.RenderJSON(job); err != nil {
			return err
		}
	}
	var err error
	if out == "" {
		_, err = stdout.Write(b)
	} else {
		err = os.WriteFile(out, b, 0o644)
	}
	if err != nil {
		return fmt.Errorf("write job: %w", err)
	}
	return nil
}
