// Package storage keeps a training run's history and checkpoints under
// <storage path>/<run name>/, the counterpart of Ray Train's run storage.
// Nothing is ever lost or half-visible: a process killed at any instant
// leaves the previous checkpoint latest and loadable.
//
// Layout of a run directory:
//
//	progress.jsonl         one JSON record per report, appended by one writer
//	checkpoint_000000/     committed checkpoints, index increasing
//	  MANIFEST.json        the checkpoint's record, and each file's size and SHA-256
//	checkpoint_000001/
//	checkpoint_000002.corrupt/  a checkpoint found corrupt on restore, kept for a person
//	.writer.lock           flock(2) held by the single writer
//	.staging-*, .trash-*   scratch space, removed by Open
//
// A checkpoint is committed in this order: its files are written into a
// staging directory; every file is hashed and flushed; the manifest
// (ManifestFile) is written last and flushed, then the staging directory;
// the staging directory is renamed to checkpoint_NNNNNN, the run directory
// is flushed, and the record naming it is appended and flushed. A
// checkpoint exists if and only if its manifest does: a crash between the
// rename and the record leaves a complete checkpoint, and Open rebuilds its
// record from the manifest, as it does for every checkpoint whose record is
// missing (a lost or cut progress.jsonl). Open never deletes a checkpoint
// for want of a record; one it cannot rebuild a record for stops it with an
// error naming the directory. Old checkpoints are deleted by renaming them
// to a trash name first, so a half-deleted directory never carries a
// checkpoint's name.
//
// Restoring checks the latest checkpoint against its manifest (Latest,
// LatestIntact): a corrupt one is moved aside to <name>.corrupt, with an
// error logged, and the newest intact one is restored. Checkpoints written
// before manifests existed restore unverified.
//
// progress.jsonl is read as a stream, a line at a time (ScanProgressFile);
// a symbolic link or anything but a regular file is refused, and so is a
// step lower than the one before it.
//
// Retention follows Ray Train's CheckpointConfig: keep NumToKeep
// checkpoints ranked by a score attribute (or the most recent), and never
// delete the latest. Prune and Rank are the pure decisions behind it.
//
// Storage paths are local directories, which may be NFS mounts; URI schemes
// other than file:// (s3://, gs://) are rejected with ErrUnsupportedScheme.
//
// Example:
//
//	run, err := storage.Open("./results", "quickstart", storage.Policy{
//		NumToKeep: 2, ScoreAttribute: "loss", ScoreOrder: storage.ScoreMin,
//	})
//	if err != nil {
//		return err
//	}
//	defer run.Close()
//	staged, err := run.Stage()
//	if err != nil {
//		return err
//	}
//	defer staged.Abort() // no-op once committed
//	if err := os.WriteFile(filepath.Join(staged.Dir(), "model.bin"), weights, 0o644); err != nil {
//		return err
//	}
//	name, err := run.Commit(staged, storage.Record{Step: 100, Metrics: map[string]any{"loss": 0.1}})
//	...
//	name, path, ok, err := run.Latest() // on resume: the newest intact checkpoint
package storage
