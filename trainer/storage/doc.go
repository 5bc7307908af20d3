// Package storage keeps a training run's history and checkpoints under
// <storage path>/<run name>/, the counterpart of Ray Train's run storage.
// Nothing is ever lost or half-visible: a process killed at any instant
// leaves the previous checkpoint latest and loadable.
//
// Layout of a run directory:
//
//	progress.jsonl         one JSON record per report, appended by one writer
//	checkpoint_000000/     committed checkpoints, index increasing
//	checkpoint_000001/
//	.writer.lock           flock(2) held by the single writer
//	.staging-*, .trash-*   scratch space, removed by Open
//
// A checkpoint is committed in this order: its files are written into a
// staging directory, every file and the staging directory are flushed, the
// staging directory is renamed to checkpoint_NNNNNN, the run directory is
// flushed, and only then is the record naming it appended and flushed. The
// record is the commit point: a checkpoint directory without a record is
// the debris of a crash and Open removes it. Old checkpoints are deleted by
// renaming them to a trash name first, so a half-deleted directory never
// carries a checkpoint's name.
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
//	name, path, ok, err := run.Latest() // on resume
package storage
