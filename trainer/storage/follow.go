package storage

import (
	"context"
	"slices"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// Follower reads a run's records while the run is written, for a reader
// that shows it live (the dashboard): each Next returns what was recorded
// since the call before and the checkpoints that exist now, at the cost
// of what is new, not of the history. On a directory it reads the bytes
// appended to progress.jsonl since the last call (a stat, and one read
// when the file grew); on an object store it is a read-only ObjectRun,
// which lists the progress segments after the last one it read. A history
// a resumed run rewrote (TruncateAfter) comes again whole, with Reset
// set. A run not started yet has no records until it starts. A Follower
// is not safe for concurrent use.
type Follower struct {
	root, run string
	opts      []Option
	src       tailSource
	ckpts     []Record // the live checkpoints' records at the last Next
}

// Followed is what one Next found.
type Followed struct {
	// Records are those written since the last Next. With Reset the
	// caller drops what it had: Records are then the whole history.
	Records []Record
	Reset   bool
	// Checkpoints are the records of the checkpoints that exist, in
	// commit order (a checkpoint exists while its directory, or on an
	// object store its manifest, does). CheckpointsChanged reports that
	// they differ from the last Next's.
	Checkpoints        []Record
	CheckpointsChanged bool
}

// tailSource is one backend's way of following a run.
type tailSource interface {
	next() (recs []Record, reset bool, err error)
	exists(checkpoint string) (bool, error)
	failed(attempt string) (Failure, bool, error)
	close() error
}

// Follow starts following the run named run under the storage path root.
// ctx bounds the calls to an object store for the Follower's whole life.
// Of opts only WithObjectConfig (or WithStorageOptions) and WithLogger
// count.
func Follow(ctx context.Context, root, run string, opts ...Option) (*Follower, error) {
	f := &Follower{root: root, run: run, opts: opts}
	if !IsObjectPath(root) {
		dir, err := runDir(root, run)
		if err != nil {
			return nil, err
		}
		f.src = &fileTail{root: root, run: run, dir: dir}
		return f, nil
	}
	st, err := objstore.Open(ctx, root, objectConfig(opts))
	if err != nil {
		return nil, err
	}
	r, err := OpenObjectReadOnly(ctx, st, run, Policy{}, opts...)
	if err != nil {
		return nil, err
	}
	f.src = &objectTail{r: r}
	return f, nil
}

// Next reads what was recorded since the last call.
func (f *Follower) Next() (Followed, error) {
	recs, reset, err := f.src.next()
	if err != nil {
		return Followed{}, err
	}
	// A checkpoint retention deleted never comes back: only those alive at
	// the last look and the new ones are looked at, a few at most.
	cands := f.ckpts
	if reset {
		cands = nil
	}
	for _, rec := range recs {
		if rec.Checkpoint != "" {
			cands = append(cands, rec)
		}
	}
	live := make([]Record, 0, len(cands))
	for _, c := range cands {
		ok, err := f.src.exists(c.Checkpoint)
		if err != nil {
			return Followed{}, err
		}
		if ok {
			live = append(live, c)
		}
	}
	changed := reset || !slices.EqualFunc(live, f.ckpts, func(a, b Record) bool { return a.Checkpoint == b.Checkpoint })
	f.ckpts = live
	return Followed{Records: recs, Reset: reset, Checkpoints: cloneRecords(live), CheckpointsChanged: changed}, nil
}

// NextRecords is Next without the checkpoints, for a reader of the
// records alone (the tuner): those recorded since the last call, and
// reset when the history was rewritten (recs are then all of it). A
// Follower is read with Next or with NextRecords, not both.
func (f *Follower) NextRecords() (recs []Record, reset bool, err error) { return f.src.next() }

// Failed returns the run's failure mark when it failed for good in the
// given attempt, as FailedForGood does ("" for any attempt), through the
// Follower's open store.
func (f *Follower) Failed(attempt string) (Failure, bool, error) { return f.src.failed(attempt) }

// Close releases the Follower's files or store.
func (f *Follower) Close() error { return f.src.close() }

// objectTail follows a run on an object store.
type objectTail struct {
	r *ObjectRun
	n int // records read so far
}

func (t *objectTail) next() ([]Record, bool, error) {
	recs, n, reset, err := t.r.recordsFrom(t.n)
	if err != nil {
		return nil, false, err
	}
	t.n = n
	return recs, reset, nil
}

func (t *objectTail) exists(name string) (bool, error) { return t.r.hasManifest(name) }

func (t *objectTail) failed(attempt string) (Failure, bool, error) {
	return failedOn(t.r.ctx, t.r.st, t.r.run, attempt)
}

func (t *objectTail) close() error { return t.r.Close() }
