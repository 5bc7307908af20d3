// Package builtins holds the training functions that ship inside the
// nomad-train and nomad-driver-train binaries (entrypoint { builtin = "..." }),
// and WorkerMain, the entry point of a binary re-executed as a worker for one.
package builtins

import (
	"context"
	"fmt"
	"os"
	"sort"

	"github.com/nomad-train/nomad-train/examples/mnist"
	"github.com/nomad-train/nomad-train/examples/quickstart"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/external"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// WorkerArg is the first command-line argument that makes nomad-train or
// nomad-driver-train run as a worker for the builtin named in
// NOMAD_TRAIN_BUILTIN.
const WorkerArg = "worker"

// table maps builtin names to training functions.
var table = map[string]trainer.TrainFunc{
	"quickstart":         quickstart.Train,
	"mnist-mlp":          mnist.TrainMLP,
	"mnist-cnn":          mnist.TrainCNN,
	"mnist-logreg":       mnist.TrainLogReg,
	external.BuiltinName: external.Train,
}

// Lookup returns the builtin training function called name.
func Lookup(name string) (trainer.TrainFunc, bool) {
	fn, ok := table[name]
	return fn, ok
}

// Names lists the builtins, sorted.
func Names() []string {
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// WorkerMain runs the builtin named by NOMAD_TRAIN_BUILTIN as one worker and
// returns the process exit code. It takes no context: the worker runtime
// handles SIGTERM and SIGINT itself (checkpoint, then stop within the grace
// period), where a context cancelled by the signal would abort the step in
// flight.
func WorkerMain() int {
	name := os.Getenv(workerenv.Builtin)
	fn, ok := Lookup(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "nomad-train worker: unknown builtin %q (known: %v)\n", name, Names())
		return trainer.ExitBadEnv
	}
	return trainer.RunWorker(context.Background(), fn)
}
