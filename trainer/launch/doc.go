// Package launch is the embedded default backend: it runs a gang of workers
// as processes on this machine, serves them an embedded rendezvous store,
// streams their output with a "[rank N]" prefix, stops them all on Ctrl-C or
// when one fails, and reports how each ended. No Nomad, no Consul.
//
//	out, err := launch.Launch(ctx, launch.Options{
//		Command: exe, Args: []string{"worker"}, NumWorkers: 4,
//		RunName: "quickstart", StoragePath: "./results",
//		Env: []string{"NOMAD_TRAIN_BUILTIN=quickstart"},
//	})
package launch
