package main

import (
	"context"
	"fmt"
	"io"

	"github.com/nomad-train/nomad-train/scheduler/console"
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
	if err := console.WriteJob(job, *asJSON, *out, stdout); err != nil {
		fmt.Fprintf(stderr, "nomad-train compile: %v\n", err)
		return exitSpec
	}
	console.PrintSecretHint(stderr, job)
	return exitOK
}
