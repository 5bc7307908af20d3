package workerenv

import (
	"encoding/json"
	"time"
)

// Run describes one training run: the one description of it, whatever it
// was written in (train.hcl's Spec.RunSpec, trainer.Run and Scaling) and
// wherever it runs (trainer/launch on this machine; on Nomad, compiled into
// the train driver's task config, from which the driver rebuilds the same
// worker environment). Zero values keep the runtime's defaults.
type Run struct {
	Name       string
	NumWorkers int
	// MinWorkers, when below NumWorkers, makes the gang elastic: it trains
	// with as few as MinWorkers while the others are lost or not yet
	// there (0: exactly NumWorkers).
	MinWorkers  int
	StoragePath string
	// Storage holds the non-secret options of an s3:// StoragePath.
	Storage    StorageOptions
	Entrypoint Entrypoint
	// Config is the training loop config, JSON.
	Config      json.RawMessage
	Checkpoint  CheckpointPolicy
	MaxFailures int // -1 unlimited

	RendezvousTimeout time.Duration
	// Settle is how long an elastic gang that has MinWorkers waits for
	// more before it starts (0: the runtime's default).
	Settle time.Duration
	// ConsulOutageGrace is how long a healthy gang trains on through a
	// Consul outage.
	ConsulOutageGrace time.Duration
	CollectiveTimeout time.Duration
	// StallFloor and StallFactor set the workers' progress watchdog.
	StallFloor  time.Duration
	StallFactor float64
	// Env is the run's own environment for every worker (train.hcl's env),
	// KEY=VALUE, beside the contract variables.
	Env []string
}

// WorkerEnv is what the run decides of every worker's Env: what a launcher
// adds is per worker or per place (member, node, address, rendezvous
// endpoint, secret, events file, rank hint, stop grace).
func (r Run) WorkerEnv() Env {
	return Env{
		RunName:           r.Name,
		WorldSize:         r.NumWorkers,
		MinWorldSize:      r.minWorkers(),
		Settle:            r.Settle,
		RankHint:          -1,
		StoragePath:       r.StoragePath,
		StorageEndpoint:   r.Storage.Endpoint,
		StorageRegion:     r.Storage.Region,
		StoragePathStyle:  r.Storage.PathStyle,
		Config:            r.Config,
		Checkpoint:        r.Checkpoint,
		MaxFailures:       r.MaxFailures,
		RendezvousTimeout: r.RendezvousTimeout,
		ConsulOutageGrace: r.ConsulOutageGrace,
		CollectiveTimeout: r.CollectiveTimeout,
		StallFloor:        r.StallFloor,
		StallFactor:       r.StallFactor,
	}
}

// minWorkers is MinWorkers where it makes the gang elastic, else 0.
func (r Run) minWorkers() int {
	if r.MinWorkers > 0 && r.MinWorkers < r.NumWorkers {
		return r.MinWorkers
	}
	return 0
}

// StorageOptions are the non-secret options of an object store (an
// s3://bucket/prefix storage path), as train.hcl's storage block sets
// them. Zero values leave each to the AWS chain. Credentials have no
// place here: workers get them from the AWS chain (environment, shared
// config and profiles, instance or task roles).
type StorageOptions struct {
	// Endpoint is the server's base URL (MinIO, Ceph RGW, R2, ...).
	Endpoint string
	// Region is the bucket's region.
	Region string
	// PathStyle addresses buckets as endpoint/bucket.
	PathStyle bool
}

// Storage returns the object store options e carries.
func (e Env) Storage() StorageOptions {
	return StorageOptions{Endpoint: e.StorageEndpoint, Region: e.StorageRegion, PathStyle: e.StoragePathStyle}
}
