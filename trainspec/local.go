package trainspec

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// What a spec means when it runs on this machine rather than on Nomad.

// LocalWorkersPerCore is how many worker processes per core a local run
// starts without -force; LocalWorkersFloor is the least limit on any
// machine. Past it, num_workers is far more likely a typo or a spec meant
// for a cluster than a wish to overload the machine.
const (
	LocalWorkersPerCore = 8
	LocalWorkersFloor   = 16
)

// LocalWorkerLimit is the most workers a local run on cores cores starts
// without -force.
func LocalWorkerLimit(cores int) int { return max(LocalWorkersPerCore*cores, LocalWorkersFloor) }

// CheckLocalWorkers reports, at num_workers, a spec that asks for more
// worker processes than a machine with cores cores sensibly runs.
func (s *Spec) CheckLocalWorkers(cores int) hcl.Diagnostics {
	limit := LocalWorkerLimit(cores)
	if s.Scaling.NumWorkers <= limit {
		return nil
	}
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Too many workers for this machine",
		Detail: fmt.Sprintf("num_workers = %d would start %d worker processes here, on %d cores; a local run starts at most %d (%d per core) unless run with -force. Lower num_workers, or run on Nomad (-address).",
			s.Scaling.NumWorkers, s.Scaling.NumWorkers, cores, limit, LocalWorkersPerCore),
		Subject: s.ranges.rangeOr(s.ranges.numWorkers),
	}}
}

// Dir is the directory of the spec's file: a local run starts its workers
// there, so that a relative command or script path (python3 train.py)
// names a file beside the spec wherever nomad-train runs from. It is ""
// for a spec not read from a file.
func (s *Spec) Dir() string {
	name := s.ranges.block.Filename
	if name == "" || strings.HasPrefix(name, "<") {
		return ""
	}
	return filepath.Dir(name)
}
