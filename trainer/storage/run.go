package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// Crash points: where a test hook may stop the writer to simulate a crash.
const (
	pointSynced        = "synced"         // staging fsynced, not renamed
	pointRenamed       = "renamed"        // renamed and run dir fsynced, no record
	pointRecordPartial = "record-partial" // half of the record line written
	pointRecorded      = "recorded"       // record written, retention not run
	pointTrashed       = "trashed"        // pruned checkpoint renamed to trash, not removed
	pointFlushed       = "flushed"        // a progress record was fsynced
)

// Option configures Open and OpenReadOnly.
type Option func(*options)

type options struct {
	log      hclog.Logger
	now      func() time.Time
	leaseTTL time.Duration // ObjectRun only
	localDir string        // ObjectRun only
	objCfg   objstore.Config
	retryFor time.Duration // an object store's retries (WithRetryFor)
	stall    time.Duration // an object store's stall timeout (WithStallTimeout)
	retried  func()        // told of each retry (WithRetryCounter)
	environ  []string      // an object store's only environment (WithTaskEnviron)
	owner    *int          // FailedForGood on a directory: whose marks count (WithMarkOwner)
	attempt  string        // ObjectRun only: the writer's attempt (WithWriter)
	gen      uint64        // ObjectRun only: the writer's generation (WithWriter)
	progress *Progress     // DownloadCheckpoint only (WithProgress)
}

// WithLogger sets the logger for recovery and retention messages.
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock that stamps records with a zero Time.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Recovery describes what Open repaired in a run directory.
type Recovery struct {
	// TornBytes is the length of the torn last line cut from progress.jsonl.
	TornBytes int
	// Removed lists the scratch entries (staging, trash, temporary files)
	// that Open deleted. Checkpoint directories are never among them.
	Removed []string
	// Pruned lists committed checkpoints that retention deleted during Open
	// (a crash had interrupted it).
	Pruned []string
	// Rebuilt lists checkpoints that no record named (a crash between
	// the rename and the record, or a lost or cut progress.jsonl), whose
	// records Open rebuilt from their manifests.
	Rebuilt []string
}

// Run is the storage of one training run: its progress history and its
// checkpoints under <storage path>/<run name>/. A Run opened with Open is
// the run's single writer; its methods are safe for concurrent use.
type Run struct {
	dir      string
	policy   Policy
	readOnly bool
	log      hclog.Logger
	now      func() time.Time
	hook     func(point string) // tests stop the process here; nil in production

	mu sync.Mutex
	// Guarded by mu; a read-only Run uses only closed:
	progress *os.File        // progress.jsonl, append-only
	size     int64           // bytes of progress.jsonl that hold records
	lock     *os.File        // holds the writer lock
	recs     []Record        // every record, in file order
	live     map[string]bool // recorded checkpoints whose directory exists
	next     int64           // index of the next checkpoint
	broken   error           // sticky: the file may differ from recs
	closed   bool
	recovery Recovery
	intact   map[string]bool // checkpoints whose files matched their manifest
	legacy   bool            // said once that checkpoints without manifests are unverified
}

// Open opens the run named run under the storage path root as its writer,
// creating the directories when needed and recovering from a crash of the
// previous writer: it cuts a torn last line off progress.jsonl, removes
// staging and trash directories, rebuilds the records of checkpoints that
// none names from their manifests, and applies retention under p (finishing what a crash
// interrupted, or a tighter policy). Only one process may hold a run open
// for writing (ErrLocked otherwise).
func Open(root, run string, p Policy, opts ...Option) (*Run, error) {
	r, err := newRun(root, run, p, false, opts)
	if err != nil {
		return nil, err
	}
	if err := r.openWriter(); err != nil {
		r.closeFiles()
		return nil, fmt.Errorf("opening run %s: %w", r.dir, err)
	}
	return r, nil
}

// OpenReadOnly opens a run for reading without taking the writer lock or
// repairing anything, for ranks that only load checkpoints; p only ranks
// Best. Every read re-reads progress.jsonl, so a reader follows a live
// writer; a torn last line is skipped. The run directory must exist.
func OpenReadOnly(root, run string, p Policy, opts ...Option) (*Run, error) {
	r, err := newRun(root, run, p, true, opts)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(r.dir); err != nil {
		return nil, fmt.Errorf("opening run read-only: %w", err)
	}
	return r, nil
}

func newRun(root, run string, p Policy, readOnly bool, opts []Option) (*Run, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("invalid storage policy: %w", err)
	}
	dir, err := localRoot(root)
	if err != nil {
		return nil, err
	}
	if err := checkRunName(run); err != nil {
		return nil, err
	}
	o := options{log: hclog.NewNullLogger(), now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	return &Run{
		dir:      filepath.Join(dir, run),
		policy:   p,
		readOnly: readOnly,
		log:      o.log.Named("storage").With("run", run),
		now:      o.now,
		live:     map[string]bool{},
		intact:   map[string]bool{},
	}, nil
}

// openWriter creates, locks and recovers the run directory.
func (r *Run) openWriter() error {
	_, statErr := os.Stat(r.dir)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return fmt.Errorf("creating run directory: %w", err)
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		if err := syncDir(filepath.Dir(r.dir)); err != nil {
			return err
		}
	}
	lock, err := lockRun(filepath.Join(r.dir, lockFile))
	if err != nil {
		return err
	}
	r.lock = lock
	if err := r.recoverProgress(); err != nil {
		return err
	}
	if err := r.recoverDir(); err != nil {
		return err
	}
	for _, name := range Prune(r.liveRecords(), r.policy) {
		if err := r.removeCheckpoint(name); err != nil {
			return err
		}
		r.recovery.Pruned = append(r.recovery.Pruned, name)
	}
	if len(r.recovery.Removed)+len(r.recovery.Pruned) > 0 {
		r.log.Info("recovered run directory", "removed", r.recovery.Removed, "pruned", r.recovery.Pruned)
		return syncDir(r.dir)
	}
	return nil
}

// trash renames an entry of the run directory to a fresh trash name, so
// that no crash leaves it half-deleted under its own name, and returns the
// trash path.
func (r *Run) trash(name string) (string, error) {
	trash := filepath.Join(r.dir, scratchName(trashPrefix, name))
	if err := os.Rename(filepath.Join(r.dir, name), trash); err != nil {
		return "", fmt.Errorf("moving %s to trash: %w", name, err)
	}
	return trash, nil
}

// empty removes a trashed entry; Open removes what it leaves.
func (r *Run) empty(trash string) error {
	r.callHook(pointTrashed)
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("removing %s: %w", filepath.Base(trash), err)
	}
	return nil
}

// discard trashes an entry of the run directory and removes it.
func (r *Run) discard(name string) error {
	trash, err := r.trash(name)
	if err != nil {
		return err
	}
	return r.empty(trash)
}

// removeCheckpoint deletes a live checkpoint. mu is held.
func (r *Run) removeCheckpoint(name string) error {
	err := r.discard(name)
	if _, statErr := os.Lstat(filepath.Join(r.dir, name)); errors.Is(statErr, fs.ErrNotExist) {
		delete(r.live, name) // gone under its name, even if the trash remains
	}
	return err
}

func (r *Run) callHook(point string) {
	if r.hook != nil {
		r.hook(point)
	}
}

// Dir returns the run directory.
func (r *Run) Dir() string { return r.dir }

// LocalDir returns the run directory: where checkpoints are staged and
// restored.
func (r *Run) LocalDir() string { return r.dir }

// Recovery reports what Open repaired.
func (r *Run) Recovery() Recovery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Recovery{
		TornBytes: r.recovery.TornBytes,
		Removed:   append([]string(nil), r.recovery.Removed...),
		Pruned:    append([]string(nil), r.recovery.Pruned...),
		Rebuilt:   append([]string(nil), r.recovery.Rebuilt...),
	}
}

// writable reports why the writer cannot write, if it cannot. mu is held.
func (r *Run) writable() error {
	switch {
	case r.readOnly:
		return ErrReadOnly
	case r.closed:
		return ErrClosed
	case r.broken != nil:
		return fmt.Errorf("run storage needs reopening after an earlier failure: %w", r.broken)
	}
	return nil
}

// Append records a report that has no checkpoint. The record is flushed
// before Append returns when the policy is FsyncEveryRecord.
func (r *Run) Append(rec Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.writable(); err != nil {
		return err
	}
	if rec.Checkpoint != "" {
		return fmt.Errorf("%w: Append with checkpoint %q (use Commit)", ErrInvalidRecord, rec.Checkpoint)
	}
	if err := r.checkStep(rec.Step); err != nil {
		return err
	}
	if rec.Time.IsZero() {
		rec.Time = r.now()
	}
	rec, line, err := normalize(rec)
	if err != nil {
		return err
	}
	return r.appendLine(rec, line, r.policy.Fsync == FsyncEveryRecord)
}

// appendLine writes one record line with one write call, restoring the
// file's length if the write fails. mu is held.
func (r *Run) appendLine(rec Record, line []byte, sync bool) error {
	var err error
	if r.hook != nil && len(line) > 1 {
		// Tests stop the process between two halves of the line.
		half := len(line) / 2
		if _, err = r.progress.Write(line[:half]); err == nil {
			r.callHook(pointRecordPartial)
			_, err = r.progress.Write(line[half:])
		}
	} else {
		_, err = r.progress.Write(line)
	}
	if err != nil {
		if terr := r.progress.Truncate(r.size); terr != nil {
			r.broken = errors.Join(err, terr)
		}
		return fmt.Errorf("appending progress record: %w", err)
	}
	if sync {
		if err := r.progress.Sync(); err != nil {
			// After a failed fsync the file's contents are unknown.
			r.broken = err
			return fmt.Errorf("syncing progress: %w", err)
		}
		r.callHook(pointFlushed)
	}
	r.size += int64(len(line))
	r.recs = append(r.recs, rec)
	return nil
}

// liveRecords returns the records of live checkpoints in commit order.
// mu is held.
func (r *Run) liveRecords() []Record {
	var out []Record
	for _, rec := range r.recs {
		if rec.Checkpoint != "" && r.live[rec.Checkpoint] {
			out = append(out, rec)
		}
	}
	return out
}

// snapshot returns the records and the live checkpoints' records: the
// writer's own view, or a fresh read for a read-only Run.
func (r *Run) snapshot() (recs, live []Record, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, nil, ErrClosed
	case r.readOnly:
		return r.readSnapshot()
	}
	return cloneRecords(r.recs), cloneRecords(r.liveRecords()), nil
}

func (r *Run) readSnapshot() (recs, live []Record, err error) {
	recs, err = ReadProgressFile(filepath.Join(r.dir, ProgressFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, rec := range recs {
		if rec.Checkpoint == "" {
			continue
		}
		if fi, err := os.Lstat(filepath.Join(r.dir, rec.Checkpoint)); err == nil && fi.IsDir() {
			live = append(live, rec)
		}
	}
	return recs, live, nil
}

func cloneRecords(recs []Record) []Record {
	out := make([]Record, len(recs))
	for i, rec := range recs {
		rec.Metrics = maps.Clone(rec.Metrics)
		out[i] = rec
	}
	return out
}

// Records returns every record in the order written. The metric maps are
// copies; values nested inside them are shared.
func (r *Run) Records() ([]Record, error) {
	recs, _, err := r.snapshot()
	return recs, err
}

// Best returns the records of up to n existing checkpoints, best first
// under the policy's score attribute and order (most recent first without
// one). n <= 0 returns all of them.
func (r *Run) Best(n int) ([]Record, error) {
	_, live, err := r.snapshot()
	if err != nil {
		return nil, err
	}
	return best(live, r.policy, n), nil
}

// CheckpointPath returns the directory of a checkpoint name.
func (r *Run) CheckpointPath(name string) string { return filepath.Join(r.dir, name) }

// TruncateAfter rolls the history back to step: it atomically replaces
// progress.jsonl by the records whose Step is at most step (write a
// temporary file, flush, rename, flush the directory), then deletes the
// checkpoints only the dropped records committed. Used on resume, to drop
// reports made after the checkpoint the run restarts from.
func (r *Run) TruncateAfter(step int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.writable(); err != nil {
		return err
	}
	var keep, drop []Record
	for _, rec := range r.recs {
		if rec.Step > step {
			drop = append(drop, rec)
			continue
		}
		keep = append(keep, rec)
	}
	if len(drop) == 0 {
		return nil
	}
	if err := r.rewriteProgress(keep); err != nil {
		return err
	}
	for _, rec := range drop {
		if rec.Checkpoint != "" && r.live[rec.Checkpoint] {
			if err := r.removeCheckpoint(rec.Checkpoint); err != nil {
				return fmt.Errorf("deleting rolled-back checkpoint: %w", err)
			}
		}
	}
	return nil
}

// rewriteProgress atomically replaces progress.jsonl by recs (write a
// temporary file, flush, rename, flush the directory) and appends to the
// new file from then on. mu is held.
func (r *Run) rewriteProgress(recs []Record) error {
	var buf bytes.Buffer
	for _, rec := range recs {
		line, err := encodeRecord(rec)
		if err != nil {
			return err
		}
		buf.Write(line)
	}
	path := filepath.Join(r.dir, ProgressFile)
	tmp := filepath.Join(r.dir, scratchName(tempPrefix, ProgressFile))
	if err := writeFileSync(tmp, buf.Bytes()); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replacing progress: %w", err)
	}
	// From here the file on disk is the new one.
	if err := syncDir(r.dir); err != nil {
		r.broken = err
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		r.broken = err
		return fmt.Errorf("reopening progress: %w", err)
	}
	r.progress.Close()
	r.progress, r.size, r.recs = f, int64(buf.Len()), recs
	return nil
}

// writeFileSync creates path with data and flushes it.
func writeFileSync(path string, data []byte) error { return createFile(path, data, true) }

// writeFile creates path with data, not flushed.
func writeFile(path string, data []byte) error { return createFile(path, data, false) }

func createFile(path string, data []byte, flush bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil && flush {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Close releases the progress file and the writer lock. Staging
// directories not committed or aborted are removed by the next Open.
func (r *Run) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return r.closeFiles()
}

func (r *Run) closeFiles() error {
	var errs []error
	if r.progress != nil {
		errs = append(errs, r.progress.Close())
	}
	if r.lock != nil {
		errs = append(errs, r.lock.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing run: %w", err)
	}
	return nil
}
