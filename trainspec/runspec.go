package trainspec

import (
	"maps"
	"slices"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// RunSpec is the run the spec describes, as every launcher takes it: the
// local launcher runs it on this machine; Compile turns the same settings
// into the train driver's task config for Nomad.
func (s *Spec) RunSpec() workerenv.Run {
	r := workerenv.Run{
		Name:        s.Name,
		NumWorkers:  s.Scaling.NumWorkers,
		StoragePath: s.Run.StoragePath,
		Storage:     s.Run.Storage.Options(),
		Entrypoint: workerenv.Entrypoint{Builtin: s.Entrypoint.Builtin, Command: s.Entrypoint.Command,
			Args: s.Entrypoint.Args},
		Config: s.ConfigJSON,
		Checkpoint: workerenv.CheckpointPolicy{NumToKeep: s.Run.Checkpoint.NumToKeep,
			ScoreAttribute: s.Run.Checkpoint.ScoreAttribute, ScoreOrder: s.Run.Checkpoint.ScoreOrder},
		MaxFailures:       s.Run.Failure.MaxFailures,
		RendezvousTimeout: s.Rendezvous.Timeout,
		ConsulOutageGrace: s.Rendezvous.ConsulOutageGrace,
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		r.Env = append(r.Env, k+"="+s.Env[k])
	}
	return r
}
