package storage

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// RunStore is the storage of one training run, whatever keeps it: a
// directory (*Run) or an S3 bucket (*ObjectRun). It is what a run's
// writer and readers need: records, staged checkpoints committed with a
// record, the checkpoint to restart from, and retention applied on
// commit. See the package documentation for why the interface sits at
// this level and not at the level of objects.
type RunStore interface {
	// Append records a report without a checkpoint.
	Append(rec Record) error
	// Stage starts a checkpoint in a local staging directory.
	Stage() (*Staged, error)
	// Commit makes a staged checkpoint durable and visible with its
	// record, applies retention and returns the checkpoint's name.
	Commit(s *Staged, rec Record) (string, error)
	// Records returns every record in the order written.
	Records() ([]Record, error)
	// Best returns the records of up to n existing checkpoints, best first.
	Best(n int) ([]Record, error)
	// LatestIntact finds the newest checkpoint whose files match its
	// manifest; its Path is a local directory.
	LatestIntact() (Restore, error)
	// TruncateAfter drops the records after step and the checkpoints
	// only they committed.
	TruncateAfter(step int64) error
	// LocalDir is the local directory checkpoints are staged in and
	// restored to: the run directory itself for a Run.
	LocalDir() string
	// Close releases the writer lock (or lease).
	Close() error
}

var (
	_ RunStore = (*Run)(nil)
	_ RunStore = (*ObjectRun)(nil)
)

// IsObjectPath reports whether a storage path names an object store
// (s3://bucket/prefix) rather than a directory.
func IsObjectPath(root string) bool {
	m := schemeRE.FindStringSubmatch(root)
	return m != nil && strings.EqualFold(m[1], "s3")
}

// OpenStore opens the run named run under root as its writer: an
// ObjectRun for an s3:// storage path (WithObjectConfig gives its
// non-secret options; credentials come from the AWS chain), a Run
// otherwise. ctx bounds the
// ObjectRun's calls for its whole life.
func OpenStore(ctx context.Context, root, run string, p Policy, opts ...Option) (RunStore, error) {
	if !IsObjectPath(root) {
		return Open(root, run, p, opts...)
	}
	st, err := objstore.Open(ctx, root, objectConfig(opts))
	if err != nil {
		return nil, err
	}
	return OpenObject(ctx, st, run, p, opts...)
}

// OpenStoreReadOnly opens a run for reading, as OpenStore opens it for
// writing.
func OpenStoreReadOnly(ctx context.Context, root, run string, p Policy, opts ...Option) (RunStore, error) {
	if !IsObjectPath(root) {
		return OpenReadOnly(root, run, p, opts...)
	}
	st, err := objstore.Open(ctx, root, objectConfig(opts))
	if err != nil {
		return nil, err
	}
	return OpenObjectReadOnly(ctx, st, run, p, opts...)
}

// WithObjectConfig sets the non-secret options of an s3:// storage path
// for OpenStore and OpenStoreReadOnly.
func WithObjectConfig(cfg objstore.Config) Option { return func(o *options) { o.objCfg = cfg } }

// WithStorageOptions is WithObjectConfig for the options of a run
// (train.hcl's storage block, as workers get them): the one translation
// from a run's options to the S3 client's.
func WithStorageOptions(o workerenv.StorageOptions) Option {
	return WithObjectConfig(objstore.Config{Endpoint: o.Endpoint, Region: o.Region, PathStyle: o.PathStyle})
}

// WithTaskEnviron makes an object store's keys, region and endpoint come
// from environ alone (objstore.Config.Environ): the driver, which runs as
// root, reads a task's failure mark with the task's own keys, never with
// the client's environment, shared AWS files or role.
func WithTaskEnviron(environ []string) Option {
	return func(o *options) { o.environ = slices.Clip(environ) }
}

// WithRetryFor makes an object store retry a request that failed for a
// reason that may pass for about d before failing it
// (objstore.Config.RetryFor): workers train through a short outage of
// their S3 server. The logger (WithLogger) hears of the retries, at most
// once every retryLogEvery.
func WithRetryFor(d time.Duration) Option { return func(o *options) { o.retryFor = d } }

// WithRetryCounter has count called for each of an object store's
// retries (WithRetryFor's), from the store's goroutines: a worker's
// metrics count them.
func WithRetryCounter(count func()) Option { return func(o *options) { o.retried = count } }

// WithStallTimeout fails an object store's request whose connection
// moved no byte either way for about d (objstore.Config.StallTimeout);
// zero keeps objstore's default.
func WithStallTimeout(d time.Duration) Option { return func(o *options) { o.stall = d } }

// retryLogEvery spaces the warnings about an object store's retries: in an
// outage every request in flight retries.
const retryLogEvery = 5 * time.Second

// optionsOf applies opts to the zero options.
func optionsOf(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func objectConfig(opts []Option) objstore.Config {
	o := optionsOf(opts)
	cfg := o.objCfg
	if o.environ != nil {
		cfg.Environ = o.environ
	}
	if o.retryFor > 0 {
		cfg.RetryFor, cfg.OnRetry = o.retryFor, retryLogger(o.log, o.retryFor)
		if log, count := cfg.OnRetry, o.retried; count != nil {
			cfg.OnRetry = func(attempt int, err error, wait time.Duration) {
				if log != nil {
					log(attempt, err, wait)
				}
				count()
			}
		}
	}
	if o.stall != 0 {
		cfg.StallTimeout = o.stall
	}
	return cfg
}

// retryLogger warns log (if any) of an object store's retries, at most
// once every retryLogEvery.
func retryLogger(log hclog.Logger, grace time.Duration) func(int, error, time.Duration) {
	if log == nil {
		return nil
	}
	var last atomic.Int64 // unix nanoseconds of the last warning
	return func(attempt int, err error, wait time.Duration) {
		now := time.Now().UnixNano()
		if prev := last.Load(); now-prev < int64(retryLogEvery) || !last.CompareAndSwap(prev, now) {
			return
		}
		log.Warn("object store request failed; retrying", "attempt", attempt, "retry_in", wait.Round(time.Millisecond),
			"retries_for", grace, "error", err)
	}
}

// RunLocation names where the run named run under root is kept, for
// people: root/run as a path, or as a URL for an object store.
func RunLocation(root, run string) string {
	if IsObjectPath(root) {
		return strings.TrimRight(root, "/") + "/" + run
	}
	return filepath.Join(root, run)
}

// ProgressLocation is where the records of the run named run under root
// are kept, for people: its progress.jsonl, or on an object store the
// prefix of its progress segments.
func ProgressLocation(root, run string) string {
	if IsObjectPath(root) {
		return RunLocation(root, run) + "/" + objProgressDir
	}
	return filepath.Join(root, run, ProgressFile)
}

// CheckpointLocation is where checkpoint name of the run named run under
// root is kept, as a Result names it: a directory, or an s3:// location
// (DownloadCheckpoint copies either out).
func CheckpointLocation(root, run, name string) string {
	if IsObjectPath(root) {
		return RunLocation(root, run) + "/" + objCheckpointDir + name
	}
	return filepath.Join(root, run, name)
}
