package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// Keys of a run on an object store, relative to the store's prefix. See
// the package documentation for the layout.
const (
	objProgressDir   = "progress/"
	objCheckpointDir = "checkpoints/"
	objLeaseKey      = ".writer.lease"
	objCorruptSuffix = ".corrupt" // the manifest of a quarantined checkpoint, renamed
)

// DefaultLeaseTTL is how long an ObjectRun's writer lease lasts without
// renewal: the longest a new writer waits after a writer is killed.
const DefaultLeaseTTL = 30 * time.Second

// leaseReleaseTimeout bounds Close's deletion of the lease.
const leaseReleaseTimeout = 10 * time.Second

// WithLeaseTTL sets the writer lease's time to live (ObjectRun only).
func WithLeaseTTL(d time.Duration) Option { return func(o *options) { o.leaseTTL = d } }

// WithWriter names the writer an ObjectRun's lease records: the attempt
// at the run (AttemptID of its secret) and the rendezvous generation
// whose rank 0 opens it. A writer so named takes over at once a lease
// held by an earlier generation of the same attempt, instead of waiting
// up to the lease's TTL for it to expire (the node that ran the earlier
// rank 0 was lost); any other holder is waited for as without it. The
// directory backend ignores it (its flock dies with its holder).
func WithWriter(attempt string, generation uint64) Option {
	return func(o *options) { o.attempt, o.gen = attempt, generation }
}

// WithLocalDir sets the local directory an ObjectRun stages checkpoints in
// and restores them to; by default a fresh temporary directory that Close
// removes.
func WithLocalDir(dir string) Option { return func(o *options) { o.localDir = dir } }

// ObjectRun is the storage of one training run on an S3-compatible object
// store, under <prefix>/<run name>/. It keeps the guarantees of a Run:
// a checkpoint exists if and only if its manifest does, and a writer
// killed at any instant leaves the previous checkpoint latest and
// loadable. An ObjectRun opened with OpenObject is the run's single
// writer (a lease object stands in for flock); its methods are safe for
// concurrent use.
type ObjectRun struct {
	st       *objstore.Store
	run      string
	files    objFiles
	ctx      context.Context // bounds every call; the interface has no ctx per call
	policy   Policy
	readOnly bool
	log      hclog.Logger
	now      func() time.Time
	local    string                             // staging and restore directory
	ownLocal bool                               // local was made by us and is removed by Close
	hook     atomic.Pointer[func(point string)] // tests stop here; background writes call it too
	lease    *lease                             // writer only
	bg       sync.WaitGroup                     // retention's deletions and segment writes in flight

	mu sync.Mutex
	// Guarded by mu:
	recs     []Record
	keys     []string        // progress segment keys, parallel to recs
	cursor   string          // last segment key read (read-only follow)
	check    progressCheck   // validation state across segments
	live     map[string]bool // checkpoints whose manifest exists
	intact   map[string]bool
	next     int64 // index of the next checkpoint
	seq      int64 // sequence number of the next progress segment
	closed   bool
	recovery Recovery
	reserved map[string]bool // names Reserve gave, not yet committed or abandoned
	segs     *segmentWrite   // the last segment written in the background

	inlineBuf inlineBuffer // for the files a manifest carries
}

// OpenObject opens the run named run on st as its writer: it takes the
// writer lease, reads the progress segments, deletes the orphans of a
// crashed commit (checkpoint objects without a manifest, unfinished
// multipart uploads), rebuilds the records of checkpoints that have a
// manifest but no record, and applies retention under p.
func OpenObject(ctx context.Context, st *objstore.Store, run string, p Policy, opts ...Option) (*ObjectRun, error) {
	r, err := newObjectRun(ctx, st, run, p, false, opts)
	if err != nil {
		return nil, err
	}
	if err := r.openWriter(); err != nil {
		r.release()
		return nil, fmt.Errorf("opening run %s: %w", r.where(), err)
	}
	return r, nil
}

// OpenObjectReadOnly opens a run for reading without the lease. Records
// follows a live writer at the cost of the new segments only: it lists
// after the last key it read.
func OpenObjectReadOnly(ctx context.Context, st *objstore.Store, run string, p Policy, opts ...Option) (*ObjectRun, error) {
	return newObjectRun(ctx, st, run, p, true, opts)
}

func newObjectRun(ctx context.Context, st *objstore.Store, run string, p Policy, readOnly bool, opts []Option) (*ObjectRun, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("invalid storage policy: %w", err)
	}
	if err := checkRunName(run); err != nil {
		return nil, err
	}
	o := options{log: hclog.NewNullLogger(), now: time.Now, leaseTTL: DefaultLeaseTTL}
	for _, opt := range opts {
		opt(&o)
	}
	r := &ObjectRun{
		st: st, run: run, ctx: ctx, policy: p, readOnly: readOnly,
		log: o.log.Named("storage").With("run", run, "store", st.Location().String()),
		now: o.now, local: o.localDir,
		live: map[string]bool{}, intact: map[string]bool{},
		inlineBuf: make(inlineBuffer, 1),
	}
	r.files = objFiles{ctx: ctx, st: st, run: run}
	r.check.path = r.key(objProgressDir)
	if !readOnly {
		// A reader makes its directory at its first restore.
		if err := r.ensureLocal(); err != nil {
			return nil, err
		}
		r.lease = &lease{st: st, key: r.key(objLeaseKey), ttl: o.leaseTTL, now: o.now, log: r.log,
			attempt: o.attempt, gen: o.gen}
	}
	return r, nil
}

// key returns the store key of a name inside the run.
func (r *ObjectRun) key(name string) string { return r.run + "/" + name }

// ckptKey returns the store key of a file of a checkpoint.
func (r *ObjectRun) ckptKey(name, file string) string {
	return r.files.prefix(name) + file
}

func (r *ObjectRun) where() string { return r.st.Location().String() + "/" + r.run }

func (r *ObjectRun) callHook(point string) {
	if h := r.hook.Load(); h != nil {
		(*h)(point)
	}
}

// ensureLocal makes the local directory, a fresh temporary one when
// WithLocalDir gave none. mu is held, or r is not shared yet.
func (r *ObjectRun) ensureLocal() error {
	if r.local == "" {
		dir, err := os.MkdirTemp("", "nomad-train-"+r.run+"-")
		if err != nil {
			return fmt.Errorf("creating local directory: %w", err)
		}
		r.local, r.ownLocal = dir, true
		return nil
	}
	if err := os.MkdirAll(r.local, 0o755); err != nil {
		return fmt.Errorf("creating local directory: %w", err)
	}
	return nil
}

// LocalDir returns the local directory checkpoints are staged in and
// restored to.
func (r *ObjectRun) LocalDir() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.local
}

// Recovery reports what OpenObject repaired.
func (r *ObjectRun) Recovery() Recovery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Recovery{
		Removed: append([]string(nil), r.recovery.Removed...),
		Pruned:  append([]string(nil), r.recovery.Pruned...),
		Rebuilt: append([]string(nil), r.recovery.Rebuilt...),
	}
}

// writable reports why the writer cannot write. mu is held.
func (r *ObjectRun) writable() error {
	if err := r.segmentsFailed(); err != nil {
		return err
	}
	return r.open()
}

// open reports why the writer cannot write, a failed background write
// aside. mu is held.
func (r *ObjectRun) open() error {
	switch {
	case r.readOnly:
		return ErrReadOnly
	case r.closed:
		return ErrClosed
	}
	return r.lease.lost()
}

// Append records a report that has no checkpoint: one progress segment.
func (r *ObjectRun) Append(rec Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.writable(); err != nil {
		return err
	}
	if rec.Checkpoint != "" {
		return fmt.Errorf("%w: Append with checkpoint %q (use Commit)", ErrInvalidRecord, rec.Checkpoint)
	}
	rec, err := r.prepare(rec)
	if err != nil {
		return err
	}
	return r.appendSegment(rec)
}

// prepare checks a record's step and stamps its time. mu is held.
func (r *ObjectRun) prepare(rec Record) (Record, error) {
	if rec.Step < 0 {
		return rec, fmt.Errorf("%w: step %d is negative", ErrInvalidRecord, rec.Step)
	}
	if n := len(r.recs); n > 0 && rec.Step < r.recs[n-1].Step {
		return rec, fmt.Errorf("%w: step %d is lower than step %d, the last recorded", ErrInvalidRecord, rec.Step, r.recs[n-1].Step)
	}
	if rec.Time.IsZero() {
		rec.Time = r.now()
	}
	rec, _, err := normalize(rec)
	return rec, err
}

// snapshot returns the records and the live checkpoints' records: the
// writer's own view, or what is new since the last read for a reader.
func (r *ObjectRun) snapshot() (recs, live []Record, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil, ErrClosed
	}
	if r.readOnly {
		if err := r.follow(); err != nil {
			return nil, nil, err
		}
		if err := r.listLive(); err != nil {
			return nil, nil, err
		}
	}
	for _, rec := range r.recs {
		if rec.Checkpoint != "" && r.live[rec.Checkpoint] {
			live = append(live, rec)
		}
	}
	return cloneRecords(r.recs), cloneRecords(live), nil
}

// Records returns every record in the order written.
func (r *ObjectRun) Records() ([]Record, error) {
	recs, _, err := r.snapshot()
	return recs, err
}

// Best returns the records of up to n existing checkpoints, best first.
func (r *ObjectRun) Best(n int) ([]Record, error) {
	_, live, err := r.snapshot()
	if err != nil {
		return nil, err
	}
	return best(live, r.policy, n), nil
}

// Close releases the writer lease and removes the local directory when
// the ObjectRun made it.
func (r *ObjectRun) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.bg.Wait() // deletions and writes hold no lock; the lease is held until they end
	r.mu.Lock()
	werr := r.segmentsFailed()
	return errors.Join(werr, r.release())
}

func (r *ObjectRun) release() error {
	var err error
	if r.lease != nil {
		// The run's context may be over (a gang that broke cancels its
		// generation's first): delete the lease all the same, within a
		// bound, or the next writer waits out its TTL.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), leaseReleaseTimeout)
		err = r.lease.release(ctx)
		cancel()
	}
	if r.ownLocal {
		os.RemoveAll(r.local)
		r.local, r.ownLocal = "", false
	}
	return err
}
