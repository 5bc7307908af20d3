// Package builtins holds the training functions that ship inside the
// nomad-train and nomad-driver-train binaries (entrypoint { builtin = "..." }),
// and WorkerMain, the entry point of a binary re-executed as a worker for one.
package builtins

import (
	"context"
	"fmt"
	"os"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// WorkerArg is the first command-line argument that makes nomad-train or
// nomad-driver-train run as a worker for the builtin named in
// NOMAD_TRAIN_BUILTIN.
const WorkerArg = "worker"

// WorkerMain runs the builtin named by the environment as one worker and
// returns the process exit code.
func WorkerMain(ctx context.Context) int {
	env, err := workerenv.Load(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nomad-train worker: %v\n", err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "nomad-train worker: no builtin %q\n", env.Builtin)
	return 2
}
