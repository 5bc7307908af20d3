package console

import (
	"io"
	"runtime"

	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/nomad-train/nomad-train/trainspec"
)

// LocalWorkersOK refuses a local run of far more workers than this
// machine's cores (num_workers = 100000, a typo or a cluster's spec)
// unless forced: started, they would swamp the machine. The error, with
// the spec at path as its source, names the num_workers line.
func LocalWorkersOK(path string, spec *trainspec.Spec, force bool, stderr io.Writer) bool {
	if force {
		return true
	}
	diags := spec.CheckLocalWorkers(runtime.NumCPU())
	if len(diags) == 0 {
		return true
	}
	parser := hclparse.NewParser()
	parser.ParseHCLFile(path) // for the source snippet only
	PrintDiagnostics(stderr, parser, diags)
	return false
}
