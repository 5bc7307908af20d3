package nomad

import (
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// SpecRunOptions are RunJob's options for a run of spec compiled into job:
// its storage and name, its gang size, where its reports are read
// (ProgressFor, with the Consul agent CONSUL_HTTP_ADDR names) and, when
// its rendezvous is in that Consul, the keys an attempt clears so that it
// starts with the whole failure budget (the last gang's generation, left
// in Consul, would otherwise count). It puts job in namespace when the job
// names none. The caller adds the callbacks.
func SpecRunOptions(spec *trainspec.Spec, job *api.Job, namespace string) RunOptions {
	if namespace != "" && job.Namespace == nil {
		job.Namespace = &namespace
	}
	sopts := []storage.Option{storage.WithStorageOptions(spec.Run.Storage.Options())}
	opts := RunOptions{
		AttemptOptions: AttemptOptions{StoragePath: spec.Run.StoragePath, Run: spec.Name, Storage: sopts},
		Count:          spec.Scaling.NumWorkers,
	}
	var kv KV
	if c := EnvConsulKV(); c != nil {
		kv = c
		if spec.Rendezvous.BackendFor(true) == trainspec.BackendConsul {
			opts.KV = c
		}
	}
	opts.Progress = ProgressFor(namespace, *job.ID, spec.Name, spec.Run.StoragePath, kv, sopts...)
	return opts
}

// EnvProgressFor is ProgressFor with the Consul agent CONSUL_HTTP_ADDR
// names, if any: where `status` reads a run's progress from.
func EnvProgressFor(namespace, jobID, run, storagePath string, opts ...storage.Option) ProgressSource {
	var kv KV
	if c := EnvConsulKV(); c != nil {
		kv = c
	}
	return ProgressFor(namespace, jobID, run, storagePath, kv, opts...)
}
