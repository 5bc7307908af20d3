package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/trainspec"
)

func init() {
	register("compile", "Compile a train.hcl spec into a Nomad job (HCL or JSON)", runCompile)
}

func runCompile(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("compile", "compile [-json] [-o file] [-var name=value] [-var-file file] <train.hcl>", stderr)
	var sf specFlags
	sf.register(fs)
	asJSON := fs.Bool("json", false, "write the job as JSON ({\"Job\": ...}) instead of HCL")
	out := fs.String("o", "", "write the job to this file instead of stdout")
	path, code := parseArgs(fs, args, stderr)
	if code >= 0 {
		return code
	}
	_, job, ok := loadSpecFor("nomad-train compile", path, &sf, true, stderr)
	if !ok {
		return exitSpec
	}
	b := trainspec.RenderHCL(job)
	if *asJSON {
		var err error
		if b, err = trainspec.RenderJSON(job); err != nil {
			fmt.Fprintf(stderr, "nomad-train compile: %v\n", err)
			return exitSpec
		}
	}
	var err error
	if *out == "" {
		_, err = stdout.Write(b)
	} else {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train compile: write job: %v\n", err)
		return exitSpec
	}
	printSecretHint(stderr, job)
	return exitOK
}

// printSecretHint tells how to create the run secret's Variable, which
// `nomad-train run -address` writes itself but `nomad job run` does not:
// the job's template holds the workers until it exists. The secret never
// goes into the job, so this goes to stderr, not into the output.
func printSecretHint(w io.Writer, job *api.Job) {
	fmt.Fprintf(w, "==> Before `nomad job run`, store the run secret the workers authenticate with\n"+
		"    (Nomad holds them until the Variable %s exists):\n\n    %s\n\n",
		trainspec.SecretVariablePath(*job.ID), trainspec.SecretCommand(job))
	if c := trainspec.S3CredentialsCommand(job); c != "" {
		fmt.Fprintf(w, "==> and the S3 keys the workers read (AWS_* from your environment here;\n"+
			"    Nomad holds them until the Variable exists):\n\n    %s\n\n", c)
	}
}
