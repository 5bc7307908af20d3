// Package builtins holds the training functions that ship inside the
// nomad-train and nomad-driver-train binaries (entrypoint { builtin = "..." }),
// and WorkerMain, the entry point of a binary re-executed as a worker for one.
package builtins

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/nomad-train/nomad-train/examples/mnist"
	"github.com/nomad-train/nomad-train/examples/quickstart"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/external"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// table maps builtin names to training functions.
var table = map[string]trainer.TrainFunc{
	"quickstart":              quickstart.Train,
	"mnist-mlp":               mnist.TrainMLP,
	"mnist-cnn":               mnist.TrainCNN,
	"mnist-logreg":            mnist.TrainLogReg,
	workerenv.ExternalBuiltin: external.Train,
}

// configs makes, for each builtin that reads a config, the value its
// training function decodes the config into.
var configs = map[string]func() any{
	"quickstart":   func() any { c := quickstart.DefaultConfig(); return &c },
	"mnist-mlp":    func() any { c := mnist.DefaultConfig(); return &c },
	"mnist-cnn":    func() any { c := mnist.CNNConfig(); return &c },
	"mnist-logreg": func() any { c := mnist.LogRegConfig(); return &c },
}

// CheckConfig reports whether the builtin called name can decode config
// (JSON) as its workers will (trainer.DecodeConfig), so that a misspelt
// or foreign setting is found before the run, not by every worker; and
// whether the config fits a gang of minWorkers to maxWorkers (a global
// batch must split over each size), where its config says (gangChecker;
// maxWorkers 0 checks no size). A builtin without a config of its own (a
// command's) accepts any.
func CheckConfig(name string, config []byte, minWorkers, maxWorkers int) error {
	mk, ok := configs[name]
	if !ok {
		return nil
	}
	v := mk()
	err := trainer.DecodeConfig(config, v)
	if err != nil && strings.Contains(err.Error(), "unknown field") {
		return fmt.Errorf("%w (its settings: %s)", err, strings.Join(settings(v), ", "))
	}
	if g, ok := v.(gangChecker); ok && err == nil && maxWorkers > 0 {
		return g.CheckGang(max(minWorkers, 1), maxWorkers)
	}
	return err
}

// gangChecker is a builtin's config that can tell whether it fits a gang
// of minWorkers to maxWorkers.
type gangChecker interface {
	CheckGang(minWorkers, maxWorkers int) error
}

// settings lists the JSON names of the fields of the struct v points to.
func settings(v any) []string {
	t := reflect.TypeOf(v).Elem()
	var out []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
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
