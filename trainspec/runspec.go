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
		MinWorkers:  s.Scaling.MinWorkers,
		Settle:      s.Rendezvous.Settle,
		StoragePath: s.Run.StoragePath,
		Storage:     s.Run.Storage.Options(),
		Entrypoint: workerenv.Entrypoint{Builtin: s.Entrypoint.Builtin, Command: s.Entrypoint.Command,
			Args: s.Entrypoint.Args},
		Config:            s.ConfigJSON,
		Checkpoint:        s.Run.Checkpoint.Policy(),
		MaxFailures:       s.Run.Failure.MaxFailures,
		RendezvousTimeout: s.Rendezvous.Timeout,
		ConsulOutageGrace: s.Rendezvous.ConsulOutageGrace,
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		r.Env = append(r.Env, k+"="+s.Env[k])
	}
	return r
}

// Policy is the checkpoint policy as the workers' contract carries it.
func (c Checkpoint) Policy() workerenv.CheckpointPolicy {
	return workerenv.CheckpointPolicy{NumToKeep: c.NumToKeep, ScoreAttribute: c.ScoreAttribute,
		ScoreOrder: c.ScoreOrder, AsyncUpload: c.AsyncUpload, Staging: c.Staging, ResumeFrom: c.ResumeFrom}
}
