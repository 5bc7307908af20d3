package console

import (
	"context"
	"fmt"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// Download copies the checkpoint `download` names into dir
// (storage.DownloadCheckpoint) and returns its location. what is a
// checkpoint's location (s3:// or a directory), or, with a spec, also
// latest, best (by the spec's checkpoint policy) or a checkpoint's name in
// the spec's run; the spec's storage block then gives the S3 options.
func Download(ctx context.Context, spec *trainspec.Spec, what, dir string) (string, error) {
	byResult := what == "latest" || what == "best"
	named := byResult || storage.IsCheckpointName(what)
	var opts []storage.Option
	switch {
	case spec == nil && named:
		return "", fmt.Errorf("%q names a checkpoint in a spec's run: add -spec train.hcl, or give the checkpoint's location", what)
	case spec == nil:
	case named && spec.Tune != nil:
		return "", fmt.Errorf("the spec is an experiment: give the checkpoint's location, as tune prints it")
	default:
		opts = append(opts, storage.WithStorageOptions(spec.Run.Storage.Options()))
	}
	location := what
	switch {
	case byResult:
		res, err := trainer.LoadResult(spec.Run.StoragePath, spec.Name, spec.RunSpec().Checkpoint, nil, opts...)
		if err != nil {
			return "", err
		}
		ck := res.Checkpoint
		if what == "best" && len(res.BestCheckpoints) > 0 {
			ck = res.BestCheckpoints[0].Checkpoint
		}
		if ck == nil {
			return "", fmt.Errorf("run %s has no checkpoint", storage.RunLocation(spec.Run.StoragePath, spec.Name))
		}
		location = ck.Path()
	case named:
		location = storage.CheckpointLocation(spec.Run.StoragePath, spec.Name, what)
	}
	return location, storage.DownloadCheckpoint(ctx, location, dir, opts...)
}
