package trainer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// On an object store no directory is shared between the ranks of a gang:
// each rank builds its checkpoints in its node's local cache directory
// and uploads its own files; rank 0 writes the manifest. At restore rank
// 0 finds the checkpoint (downloading and checking it on its node), and
// every other node downloads it once, for all its ranks.

// openNodeCache chooses the node's cache for a run on an object store:
// <tmp>/nomad-train-<uid>/<run>-<hash>, shared by this user's ranks on
// the machine and marked in use until closeStorage. A checkpoint copy
// found in it is restored without being hashed again, so the per-user
// directory must be this user's own, private and not a link (as memory
// staging's is): another user of the machine could otherwise plant a
// checkpoint there, or a link. Where it is not, the rank keeps a private
// cache of its own (it then downloads the checkpoint itself), removed
// when the session ends. The node's first rank also sweeps the caches
// that runs left there (storage.SweepNodeCaches).
func (s *Session) openNodeCache(env workerenv.Env) error {
	if !storage.IsObjectPath(env.StoragePath) {
		return nil
	}
	base := nodeCacheBase(s.rank)
	if base == "" {
		base = os.TempDir()
	}
	dir, err := privateDir(filepath.Join(base, fmt.Sprintf("nomad-train-%d", os.Getuid())))
	if err == nil {
		c, err := storage.OpenNodeCache(dir, env.StoragePath, env.RunName)
		if err != nil {
			return err
		}
		s.cache, s.releaseNode = c.Dir, append(s.releaseNode, c.Close)
		if s.localRank == 0 {
			s.sweepNodeCaches(dir)
		}
		return nil
	}
	own, terr := os.MkdirTemp(base, "nomad-train-cache-")
	if terr != nil {
		return fmt.Errorf("node cache: %w (and a private one: %w)", err, terr)
	}
	s.log.Warn("the node's checkpoint cache is not safe to share: this rank keeps its own", "error", err, "dir", own)
	s.cache, s.releaseNode = own, append(s.releaseNode, func() error { return os.RemoveAll(own) })
	return nil
}

// sweepNodeCaches removes the node caches in dir that runs left unused
// for storage.NodeCacheIdle.
func (s *Session) sweepNodeCaches(dir string) {
	removed, err := storage.SweepNodeCaches(dir, time.Now(), storage.NodeCacheIdle)
	if len(removed) > 0 {
		s.log.Info("removed node directories unused for a day", "dir", dir, "caches", removed)
	}
	if err != nil {
		s.log.Warn("could not sweep the node's checkpoint caches", "error", err)
	}
}

// nodeCacheBase is where a rank's node keeps its caches ("": the system's
// temporary directory); tests replace it to put ranks on different nodes.
var nodeCacheBase = func(rank int) string { return "" }

// workerStorage is how a worker reaches storage: with the run's options,
// and retrying an object store's failed requests for the outage grace
// (workerenv.StorageOutageGrace), so that a short outage of the S3 server
// stalls the gang rather than failing it; a request held by a silent
// server fails after the stall timeout (workerenv.StorageStallTimeout),
// and is retried.
func workerStorage(env workerenv.Env, log hclog.Logger) []storage.Option {
	return []storage.Option{storage.WithLogger(log), storage.WithStorageOptions(env.Storage()),
		storage.WithRetryFor(env.StorageOutageGrace), storage.WithStallTimeout(env.StorageStallTimeout)}
}

// sessionStorage is workerStorage for the session's own stores, whose
// retries its metrics count.
func (s *Session) sessionStorage(env workerenv.Env) []storage.Option {
	return append(workerStorage(env, s.log), storage.WithRetryCounter(s.metrics.storageRetried))
}

// storageOptions are the options rank 0 opens the run's storage with.
func (s *Session) storageOptions(env workerenv.Env) []storage.Option {
	opts := s.sessionStorage(env)
	if storage.IsObjectPath(env.StoragePath) {
		// The generation lets rank 0 take over at once the lease of an
		// earlier generation's rank 0, whose node may be lost.
		opts = append(opts, storage.WithLocalDir(s.cache), storage.WithWriter(s.attempt, s.generation))
	}
	return opts
}

// beforeResume runs on every rank before rank 0 shares the resume point:
// on an object store, the first rank of each node other than rank 0's
// clears the checkpoints an earlier attempt half-built there (rank 0 does
// on its node as it opens the storage). No rank of the node builds one
// before the resume point is shared.
func (s *Session) beforeResume(env workerenv.Env) {
	if s.rank != 0 && s.localRank == 0 && storage.IsObjectPath(env.StoragePath) {
		s.clearScratch(s.cache)
	}
}

// afterResume opens every rank's access to an object store and has each
// node fetch the checkpoint to resume from, once for its ranks. It also
// sets how checkpoints are uploaded.
func (s *Session) afterResume(ctx context.Context, env workerenv.Env, rp *resumePoint) error {
	s.async = asyncUploads(env)
	if !storage.IsObjectPath(env.StoragePath) {
		return nil
	}
	rs, err := storage.OpenRank(s.storageContext(ctx), env.StoragePath, env.RunName, s.cache, s.sessionStorage(env)...)
	if err != nil {
		return fmt.Errorf("open run storage: %w", err)
	}
	s.objects = rs
	rp.RunDir = rs.LocalDir()
	if s.rank != 0 && rp.From != "" {
		rp.Checkpoint, err = s.fetchStart(s.storageContext(ctx), env, filepath.Join(s.cache, scratchDir))
		return err
	}
	if s.rank == 0 || rp.Name == "" {
		return nil
	}
	dir, downloaded, err := rs.Fetch(rp.Name, storage.Record{Step: rp.Step, Time: rp.CheckpointTime})
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if downloaded {
		s.log.Info("downloaded the checkpoint to resume from for this node", "checkpoint", rp.Name, "dir", dir)
	}
	rp.Checkpoint = dir
	return nil
}

// brokenGenerationWrites bounds how long the storage writes a broken
// generation had under way may go on before its next generation starts:
// half the default rejoin_timeout, after which a local launcher presumes
// a worker that has not rejoined hung, and replaces it.
const brokenGenerationWrites = workerenv.DefaultRejoinTimeout / 2

// storageContext is the context the run's storage is opened with: the
// session's, which outlives a broken generation for a while
// (runGeneration), or ctx.
func (s *Session) storageContext(ctx context.Context) context.Context {
	if s.storageCtx != nil {
		return s.storageCtx
	}
	return ctx
}

// asyncUploads says whether checkpoint uploads go on after Report
// returns: as the checkpoint policy says, and by default on an object
// store only (see CheckpointConfig.AsyncUpload).
func asyncUploads(env workerenv.Env) bool {
	if a := env.Checkpoint.AsyncUpload; a != nil {
		return *a
	}
	return storage.IsObjectPath(env.StoragePath)
}
