package trainer

import (
	"context"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Checkpoint is a directory of files that captures training state (Ray's
// Checkpoint). Build one in a directory from Session.NewCheckpointDir (on
// the run's file system, where committing it is a rename; Report refuses
// any other directory) and pass it to Session.Report; a committed
// checkpoint is opened again with Session.GetCheckpoint and read from Path.
// It holds regular files and directories only, listed with their SHA-256
// in its manifest (storage.ManifestFile) and checked before a restore.
type Checkpoint struct {
	dir  string
	opts []storage.Option // how to reach an s3:// location
}

// CheckpointFromDirectory returns a checkpoint made of the files in dir.
func CheckpointFromDirectory(dir string) *Checkpoint { return &Checkpoint{dir: dir} }

// Path is the checkpoint's directory. A committed checkpoint is read-only:
// build a new one to change it. A Result of a run kept on an object store
// names its checkpoints by their s3:// locations: ToDirectory copies one
// out.
func (c *Checkpoint) Path() string { return c.dir }

// ToDirectory copies the checkpoint into dir, a new or empty directory,
// checking every file against its manifest (Ray's to_directory): from an
// object store for an s3:// Path, with the run's storage options when the
// checkpoint came from a Result (else the AWS environment's), or from a
// checkpoint directory. dir then holds the checkpoint's files and its
// manifest, or nothing (storage.DownloadCheckpoint).
func (c *Checkpoint) ToDirectory(ctx context.Context, dir string) error {
	return storage.DownloadCheckpoint(ctx, c.dir, dir, c.opts...)
}
