package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// An experiment (a tune) keeps its trials as runs inside its own place
// under a storage path, root/<experiment>/trial_0003, and beside them the
// tuner's state (ExperimentStateFile), its results and the tuner's lock.
// On a directory the lock is a flock on a file the state sits beside; on
// an object store it is a lease object, as a run's writer holds one, and
// every state write is checked against it first, so a tuner that lost
// the lease (to a second tuner, after a partition) stops writing.

// ExperimentStateFile is an experiment's state, beside its trials.
const ExperimentStateFile = "experiment_state.json"

// Inside an experiment's place on an object store: the tuner's lease.
const experimentLeaseKey = "tuner-lease.json"

// experimentFile keeps the files a tuner writes beside its state plain
// file names, which no trial (trial_0003) takes.
var experimentFile = regexp.MustCompile(`^[a-z0-9_-]+\.(json|csv)$`)

// maxStateSize bounds an experiment state read back: thousands of trials
// with their configs and last results fit in a few MiB.
const maxStateSize = 256 << 20

// Experiment is the tuner's hold on an experiment's place: it holds the
// experiment's lock until Close, and writes the state and results there.
type Experiment struct {
	where string // the experiment's location: a directory, or s3://...
	// Directory:
	lock *os.File
	// Object store:
	ctx   context.Context
	st    *objstore.Store
	lease *lease
}

// OpenExperiment takes the lock of the experiment at where (a directory,
// made if need be, or an s3:// location): at once, or ErrLocked when
// another tuner holds it. On an object store a lease left by a tuner that
// was killed is taken once it expires (OpenExperiment waits up to the
// lease's TTL, WithLeaseTTL), unless WithWriter names the same instance
// (a Nomad allocation) as the holder's and a later generation (a later
// start of its task). ctx bounds the store's calls until Close. Of opts
// WithObjectConfig, WithLeaseTTL, WithWriter and WithLogger count.
func OpenExperiment(ctx context.Context, where string, opts ...Option) (*Experiment, error) {
	o := options{log: hclog.NewNullLogger(), now: time.Now, leaseTTL: DefaultLeaseTTL}
	for _, opt := range opts {
		opt(&o)
	}
	if !IsObjectPath(where) {
		dir, err := localRoot(where)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("make experiment directory: %w", err)
		}
		f, err := lockRun(filepath.Join(dir, ".tuner.lock"))
		if err != nil {
			return nil, fmt.Errorf("experiment %s: %w", where, err)
		}
		return &Experiment{where: dir, lock: f}, nil
	}
	st, err := objstore.Open(ctx, where, objectConfig(opts))
	if err != nil {
		return nil, fmt.Errorf("experiment %s: %w", where, err)
	}
	l := &lease{st: st, key: experimentLeaseKey, ttl: o.leaseTTL, now: o.now,
		log: o.log.Named("storage").With("experiment", where), attempt: o.attempt, gen: o.gen}
	if err := l.acquire(ctx); err != nil {
		return nil, fmt.Errorf("experiment %s: %w", where, err)
	}
	return &Experiment{where: where, ctx: ctx, st: st, lease: l}, nil
}

// WriteState replaces the experiment's state with b, whole and durably: a
// reader sees the old state or the new one. On an object store it fails
// with ErrLocked once the lease is not the tuner's any more.
func (e *Experiment) WriteState(b []byte) error {
	name := ExperimentStateFile
	if e.lease == nil {
		if err := writeFileDurable(e.where, name, b); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(e.where, name), err)
		}
		return nil
	}
	if err := e.Held(); err != nil {
		return fmt.Errorf("write %s: %w", e.where+"/"+name, err)
	}
	if _, err := e.st.Put(e.ctx, name, bytes.NewReader(b)); err != nil {
		return fmt.Errorf("write %s: %w", e.where+"/"+name, err)
	}
	return nil
}

// Held returns nil while this tuner holds the experiment, and an error
// wrapping ErrLocked once another tuner has taken it over (on an object
// store, after this one's lease expired: a partition, a stalled host).
// Other errors say the store could not be asked. A directory's lock is
// held until Close.
func (e *Experiment) Held() error {
	if e.lease == nil {
		return nil
	}
	return e.lease.check(e.ctx)
}

// Close releases the lock.
func (e *Experiment) Close() error {
	if e.lease == nil {
		return e.lock.Close()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), leaseReleaseTimeout)
	defer cancel()
	return e.lease.release(ctx)
}

// ReadExperimentState returns the state of the experiment at where, and
// when it was written; an error wrapping fs.ErrNotExist when there is
// none. Of opts only WithObjectConfig counts.
func ReadExperimentState(ctx context.Context, where string, opts ...Option) ([]byte, time.Time, error) {
	b, written, err := readWhole(ctx, where, ExperimentStateFile, maxStateSize, opts)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read experiment state: %w", err)
	}
	return b, written, nil
}

// IsExperiment reports whether where holds an experiment's state: one
// Lstat or HEAD, without reading it. Of opts only WithObjectConfig
// counts.
func IsExperiment(ctx context.Context, where string, opts ...Option) (bool, error) {
	if !IsObjectPath(where) {
		dir, err := localRoot(where)
		if err != nil {
			return false, err
		}
		return isLocalExperiment(dir), nil
	}
	st, err := objstore.Open(ctx, where, objectConfig(opts))
	if err != nil {
		return false, err
	}
	return hasObject(ctx, st, ExperimentStateFile)
}

// isLocalExperiment reports whether dir holds a state file (a regular
// file: readers refuse a link).
func isLocalExperiment(dir string) bool {
	fi, err := os.Lstat(filepath.Join(dir, ExperimentStateFile))
	return err == nil && fi.Mode().IsRegular()
}

// hasObject reports whether st holds the object key.
func hasObject(ctx context.Context, st *objstore.Store, key string) (bool, error) {
	_, err := st.Head(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// ListExperiments returns the names of the experiments under the storage
// path root, sorted: the entries that hold an experiment state. A root
// nothing has written to holds none. Of opts only WithObjectConfig
// counts.
func ListExperiments(ctx context.Context, root string, opts ...Option) ([]string, error) {
	if !IsObjectPath(root) {
		return listLocal(root, "experiments", isLocalExperiment)
	}
	st, err := objstore.Open(ctx, root, objectConfig(opts))
	if err != nil {
		return nil, fmt.Errorf("listing experiments: %w", err)
	}
	return listObject(ctx, st, "experiments", func(name string) (bool, error) {
		return hasObject(ctx, st, name+"/"+ExperimentStateFile)
	})
}

// WriteExperimentFile writes a file of results (results.csv) beside the
// state of the experiment at where, whole. Of opts only WithObjectConfig
// counts.
func WriteExperimentFile(ctx context.Context, where, name string, b []byte, opts ...Option) error {
	if !experimentFile.MatchString(name) || name == ExperimentStateFile {
		return fmt.Errorf("experiment file name %q: want a plain name.json or name.csv", name)
	}
	if err := writeWhole(ctx, where, name, b, opts); err != nil {
		return fmt.Errorf("write %s: %w", RunLocation(where, name), err)
	}
	return nil
}
