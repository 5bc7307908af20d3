// Command nomad-driver-train is the Nomad task driver plugin "train". Put it
// in the agent's plugin_dir and name it in a plugin "train" {} block. The
// same binary also runs as the executor's supervisor shim and as a worker
// for builtin training functions, among them "external", which runs a
// command entrypoint that is not a Go trainer (python3 train.py) with
// torchrun's environment; main only dispatches and wires.
package main

import (
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/builtins"
	"github.com/nomad-train/nomad-train/driver"
	"github.com/nomad-train/nomad-train/driver/executor"
	"github.com/nomad-train/nomad-train/internal/buildinfo"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case executor.ShimArg:
			os.Exit(executor.ShimMain(os.Args[1:]))
		case workerenv.WorkerArg:
			os.Exit(builtins.WorkerMain())
		case "version", "-version", "--version":
			fmt.Println("nomad-driver-train " + buildinfo.Version())
			return
		}
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "nomad-driver-train",
		Level:      hclog.Trace,
		Output:     os.Stderr,
		JSONFormat: true,
	})
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nomad-driver-train: find own executable: %v\n", err)
		os.Exit(1)
	}
	d, err := driver.New(driver.Options{
		Logger:   logger,
		Runner:   driver.ExecutorRunner{ShimPath: self, Logger: logger},
		NVML:     nvml.New(),
		SelfPath: self,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "nomad-driver-train: %v\n", err)
		os.Exit(1)
	}
	defer d.Close()
	driver.Serve(d, logger)
}
