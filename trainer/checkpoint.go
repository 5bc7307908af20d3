package trainer

// Checkpoint is a directory of files that captures training state (Ray's
// Checkpoint). Build one in a directory from Session.NewCheckpointDir (on
// the run's file system, where committing it is a rename; Report refuses
// any other directory) and pass it to Session.Report; a committed
// checkpoint is opened again with Session.GetCheckpoint and read from Path.
// It holds regular files and directories only, listed with their SHA-256
// in its manifest (storage.ManifestFile) and checked before a restore.
type Checkpoint struct {
	dir string
}

// CheckpointFromDirectory returns a checkpoint made of the files in dir.
func CheckpointFromDirectory(dir string) *Checkpoint { return &Checkpoint{dir: dir} }

// Path is the checkpoint's directory. A committed checkpoint is read-only:
// build a new one to change it.
func (c *Checkpoint) Path() string { return c.dir }
