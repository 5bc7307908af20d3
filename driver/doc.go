// Package driver is the Nomad task driver plugin "train": it runs the
// workers of a nomad-train run as Nomad tasks (driver = "train").
//
// The wire layer is nomad-train's own .proto files under proto/, with the
// proto packages, services and field numbers the Nomad client speaks
// (BasePlugin and Driver over go-plugin gRPC, Nomad's handshake). Configs
// arrive as cty-msgpack, decoded against the schemas the driver returns
// (config.go, spec.go). Tasks run through a Runner; the production Runner
// (ExecutorRunner) uses package executor's supervisor shim, so tasks keep
// running when the plugin or the agent restarts and come back through
// RecoverTask from the state in the task handle (state.go). The driver
// fingerprints GPUs through go-nvml (fingerprint.go), streams CPU, memory
// and GPU usage (stats.go) and turns the runtime's events file into Nomad
// task events (events.go).
//
// A command entrypoint that is not a nomad-train Go trainer (python3
// train.py) runs as the driver binary's builtin "external", which gives it
// torchrun's environment, as nomad-train run does locally (Launcher*). A
// task starts only with the run secret its job's template renders into
// secrets/ (ErrNoSecret), unless the plugin config allows unauthenticated
// workers. It takes a task's volume mounts (host and CSI) without
// filesystem isolation: a storage_path under a mount's destination is
// rebased onto the mount's host path, and the worker learns every mount's
// host path from NOMAD_TRAIN_MOUNTS (mounts.go).
//
// A plugin binary wires it up like this (see cmd/nomad-driver-train):
//
//	logger := hclog.New(&hclog.LoggerOptions{JSONFormat: true, Output: os.Stderr})
//	d, err := driver.New(driver.Options{
//		Logger: logger,
//		Runner: driver.ExecutorRunner{ShimPath: self, Logger: logger},
//		NVML:   nvml.New(),
//	})
//	if err != nil { ... }
//	defer d.Close()
//	driver.Serve(d, logger)
package driver
