package main

import (
	"io"
	"runtime"

	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/trainspec"
)

// localWorkersOK refuses a local run of far more workers than this
// machine's cores (num_workers = 100000, a typo or a cluster's spec) unless
// forced: started, they would swamp the machine. The error names the
// num_workers line.
func localWorkersOK(path string, spec *trainspec.Spec, force bool, stderr io.Writer) bool {
	if force {
		return true
	}
	diags := spec.CheckLocalWorkers(runtime.NumCPU())
	if len(diags) == 0 {
		return true
	}
	parser := hclparse.NewParser()
	parser.ParseHCLFile(path) // for the source snippet only
	console.PrintDiagnostics(stderr, parser, diags)
	return false
}
