package launch

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/internal/ownerlock"
	"github.com/nomad-train/nomad-train/trainer/collective"
)

// scratchPrefix starts the name of every launcher's scratch directory in
// the temporary directory, followed by the launcher's process ID.
const scratchPrefix = "nomad-train-"

// makeScratch makes this launch's scratch directory, named for this
// process and locked for it for as long as the returned file stays open.
// A launcher killed outright (SIGKILL) cannot remove it; the next launch
// on the host does (sweepStale).
func makeScratch(run string) (string, *os.File, error) {
	dir, lock, err := ownerlock.MkdirTemp("", ownerlock.Pattern(scratchPrefix, safeName(run)+"-*"))
	if err != nil {
		return "", nil, fmt.Errorf("launch: make run scratch dir: %w", err)
	}
	return dir, lock, nil
}

// sweepStale removes what launchers and workers now gone left behind: their
// scratch directories and their shared-memory regions. What a live run
// owns stays, whoever runs it. Failing to sweep is no reason not to run.
func sweepStale(logger hclog.Logger) {
	dirs, err := ownerlock.Sweep(os.TempDir(), ownerlock.PIDNamed(scratchPrefix))
	if err != nil {
		logger.Warn("cannot sweep stale scratch directories", "error", err)
	}
	regions, err := collective.SweepRegions("")
	if err != nil {
		logger.Warn("cannot sweep stale shared memory", "error", err)
	}
	if len(dirs)+len(regions) > 0 {
		logger.Info("removed files of runs now gone", "scratch_dirs", len(dirs), "shared_regions", len(regions))
	}
}
