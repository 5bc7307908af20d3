// Package launch is the embedded default backend: it runs a gang of workers
// as processes on this machine, serves them an embedded rendezvous store,
// streams their output with a "[rank N]" prefix, stops them all on Ctrl-C or
// when one fails, and reports how each ended. No Nomad, no Consul.
//
//	out, err := launch.Launch(ctx, launch.Options{Run: workerenv.Run{
//		Name: "quickstart", NumWorkers: 4, StoragePath: "./results",
//		Entrypoint: workerenv.Entrypoint{Builtin: "quickstart"},
//	}})
//
// Options.Run is the run description every launcher takes (train.hcl's
// Spec.RunSpec gives it); how a worker starts is workerenv.StartFor's
// decision, and its environment is written by workerenv.Env.Environ, as
// the task driver writes it on Nomad.
package launch
