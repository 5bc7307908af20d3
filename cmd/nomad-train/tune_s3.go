package main

import (
	"path/filepath"

	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// trialsOnS3 keeps an experiment whose storage is on S3 as tune keeps it:
// the trials' runs on S3 (<path>/<experiment>/trial_NNNN), the tuner's
// own state and lock in ./results/<experiment> on this machine.
func trialsOnS3(spec *trainspec.Spec, cfg *tune.Config) {
	if !spec.Run.IsS3() {
		return
	}
	cfg.TrialStorage = storage.RunLocation(spec.Run.StoragePath, spec.Name)
	cfg.TrialStorageOptions = spec.Run.Storage.Options()
	cfg.StoragePath = trainspec.DefaultStoragePath
}

// tuneStorage says where an experiment is kept, for people.
func tuneStorage(cfg tune.Config) string {
	dir := filepath.Join(cfg.StoragePath, cfg.Name)
	if cfg.TrialStorage == "" {
		return dir
	}
	return cfg.TrialStorage + " (the tuner's state in " + dir + ")"
}
