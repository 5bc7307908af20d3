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
// Storage paths are local directories, which may be NFS mounts, or
// s3://bucket/prefix (OpenStore picks the backend); other URI schemes
// (gs://) are rejected with ErrUnsupportedScheme.
//
// # Two backends, one interface
//
// RunStore is what a run's writer and readers use; *Run keeps a run in a
// directory, *ObjectRun on an S3-compatible object store. The interface
// sits at the level of a run's records (append a record, stage and commit
// a checkpoint, read records, find the latest intact checkpoint, roll
// back), not at the level of objects (Put, List, Delete), because the two
// stores make a commit atomic by different means: a directory by fsync
// and rename(2) under flock(2), with one append-only progress file; an
// object store by a manifest object written last with a conditional
// write, segment objects instead of appends, and a lease instead of a
// lock. An object-level interface would have the directory backend
// emulate objects and lose its rename, or the object backend emulate
// rename by copying. What the two share is pure and lives here once: the
// record and manifest encodings, the checks a reader applies to a
// history (progressCheck), and retention (Rank, Prune).
//
// # On an object store
//
// Layout under <prefix>/<run name>/:
//
//	progress/<step>-<seq>.jsonl      one segment per record, both numbers zero-padded
//	checkpoints/checkpoint_NNNNNN/   a checkpoint's big files, one object each
//	  MANIFEST.json                  written last: the checkpoint exists iff it does;
//	                                 the bytes of the small files it carries, its JSON,
//	                                 a trailer giving the JSON's length (objinline.go)
//	  MANIFEST.json.corrupt          a quarantined checkpoint's manifest, kept for a person
//	.writer.lease                    the single writer's lease
//
// A checkpoint is committed in this order: its big files are uploaded (a
// few files at a time, each big file in parallel multipart parts) while
// their SHA-256 is computed in the same pass; the manifest is written with
// If-None-Match: * (a plain write on a server that does not implement it:
// the lease alone keeps writers apart), carrying the small files (marked
// "inline": a checkpoint of at most 4 MiB whole, else files of at most
// 64 KiB up to 1 MiB: planInline), so that a small checkpoint is one
// request. The lease check that fences a writer whose lease was taken
// runs beside all this; the manifest's last byte waits for its answer
// (objstore.PutBody), so the manifest cannot exist unless it passed.
// Then the record's segment, in the background and in order
// with later segments (a reader sees the checkpoint once it is written;
// retention waits for it before deleting an older manifest). The
// files come from a local staging directory (Stage, Commit), or from
// every rank of a gang, which share no directory: the writer reserves the
// checkpoint's name (Reserve), each rank uploads its own files with a
// RankStore, opened without the lease, and the writer writes the one
// manifest from the ranks' sums (CommitFiles) or deletes what was
// uploaded (Abandon): the Sharded interface, which a Run does not need,
// since its ranks share its directory and the writer moves their files.
// The writer's own rank keeps its small files for the manifest
// (RankStore.UploadLarge). A checkpoint of another run at the same place
// (a PBT exploit's donor) is committed the same way by CloneCheckpoint
// (the Cloner interface): its objects copied by the server under a
// reserved name, its carried files inside the new manifest. A kill before the manifest leaves objects no
// reader looks at, which the next writer deletes at open with any
// unfinished multipart upload; a kill between the manifest and the record
// leaves a checkpoint whose record the next writer rebuilds from the
// manifest, as on a directory. Retention deletes a checkpoint's manifest
// first, then its files (in the background after a commit: Close waits
// for them). Checkpoint names are never reused. BenchmarkCommitVsPlainPut
// measures B6s. Since a small checkpoint's files live inside its manifest
// object, DownloadCheckpoint is how a person copies one out (of either
// backend), checked against its manifest.
//
// Progress segments are named by step, then by a sequence number, so the
// store's key order is the history's order; a reader keeps the last key it
// read and lists only after it, so following a run costs O(new records).
// TruncateAfter deletes the segments of the dropped records, newest first.
//
// LatestIntact downloads the newest recorded checkpoint whose manifest
// exists into a local directory (WithLocalDir), hashing each file as it
// arrives, and checks it against the manifest: a corrupt one is passed
// over and quarantined (its manifest renamed to MANIFEST.json.corrupt),
// and the previous one is tried, as on a directory. The local directory
// is a node's cache (NodeCacheDir), shared by the ranks on one machine: a
// download is made under a file lock, into a temporary name, and placed
// with the manifest last, which marks a copy whole; a rank that finds a
// whole copy uses it (RankStore.Fetch), so a node downloads a checkpoint
// once for all its ranks. Since a whole copy is used without hashing it
// again, the cache lives in a directory only its user can write to (the
// trainer's <tmp>/nomad-train-<uid>). A process marks the cache it uses
// (OpenNodeCache), and a cache no process has used for NodeCacheIdle is
// removed by the next rank that opens one there (SweepNodeCaches).
//
// S3 has no flock. The writer holds a lease object, created with
// If-None-Match: * and holding its holder's id, host, pid, expiry and, when
// the writer was opened WithWriter, its attempt and rendezvous generation;
// the holder rewrites it every third of its time to live (WithLeaseTTL,
// DefaultLeaseTTL) with If-Match on its own last ETag, and deletes it on
// Close with If-Match too (a read, then a delete, could delete a lease
// taken over between the two). A writer that finds a lease held by an earlier generation of its
// own attempt replaces it at once, with If-Match on the ETag it read (so
// of two takers exactly one wins): the gang has left that generation, and
// its rank 0 is dead or fenced out. Any other lease it waits for until it
// expires, at most one time to live, and takes over if it was not renewed
// meanwhile (a killed writer); it also looks when the holder's next
// renewal is due (the lease says when) and is refused as soon as it sees
// one. The takeover writes with If-Match on the expired lease's ETag,
// so that of two writers that found it expired exactly one takes it;
// otherwise it gets ErrLocked. A holder whose
// renewal finds its lease changed, or that cannot renew it, fails every
// later write; before each manifest and each progress record of its own
// (and before a roll-back) it also reads the lease (HEAD) and compares
// the ETag, because S3 cannot make one write conditional on another
// object: one round trip remains between that check and the write. A
// holder that lost its lease deletes no checkpoint objects (they may be
// the new writer's); its retention, which runs in the background after a
// commit, checks the lease before it deletes a manifest. The lease is
// advisory against a writer
// paused longer than its time to live; the conditional manifest write
// still keeps two writers from committing the same checkpoint name.
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
