package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// The run's failure for good and its attempt: recorded in storage and in
// the rendezvous store, where every worker of this attempt looks.

// markFailed records that the run failed for good (see storage.FailedFile):
// restarting workers cannot help it.
func (w *worker) markFailed(err error, code int) {
	w.recordFailure(storage.Failure{Reason: err.Error(), ExitCode: code, Time: time.Now().UTC(), Attempt: w.attempt})
}

// roots are the storage roots this worker marks and reads failures in: its
// own storage_path as it resolves it (where its driver looks before a
// restart) and the run directory's root that rank 0 reported (where every
// rank of a shared storage looks), when it differs.
func (w *worker) roots() []string {
	if w.root == "" || w.root == w.env.StoragePath {
		return []string{w.env.StoragePath}
	}
	return []string{w.env.StoragePath, w.root}
}

// recordFailure marks f in every root that has no mark of this attempt
// yet and in the rendezvous store unless a failure of this attempt is
// there already: the first reason stays. Marks of earlier attempts at a
// run of the same name are written over.
func (w *worker) recordFailure(f storage.Failure) {
	for _, root := range w.roots() {
		if _, marked, _ := storage.FailedForGood(root, w.env.RunName, w.attempt, workerStorage(w.env, w.log)...); marked {
			continue
		}
		if err := storage.MarkFailed(root, w.env.RunName, f, workerStorage(w.env, w.log)...); err != nil {
			w.log.Warn("cannot mark the run failed", "storage_path", root, "error", err)
		}
	}
	b, err := json.Marshal(f)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := rendezvous.FailedKey(w.env.RunName)
	for range 3 { // a lost compare-and-set: look at the winner
		prev, _, mine, err := w.storedFailure(ctx)
		if err == nil && prev.Version > 0 && mine {
			return // this attempt's failure is recorded: the first reason stays
		}
		ok := false
		if err == nil {
			_, ok, err = w.store.CompareAndSet(ctx, key, b, prev.Version)
		}
		if err != nil {
			w.log.Warn("cannot record the run's failure in the rendezvous store", "error", err)
			return
		}
		if ok {
			return
		}
	}
}

// storedFailure reads the failure recorded in the rendezvous store and
// whether it is this attempt's (an unreadable one counts as this
// attempt's, so that it is reported).
func (w *worker) storedFailure(ctx context.Context) (v rendezvous.Value, f storage.Failure, mine bool, err error) {
	if v, err = w.store.Get(ctx, rendezvous.FailedKey(w.env.RunName)); err != nil || v.Version == 0 {
		return v, f, false, err
	}
	if err := json.Unmarshal(v.Data, &f); err != nil {
		return v, storage.Failure{Reason: fmt.Sprintf("unreadable failure record: %v", err)}, true, nil
	}
	return v, f, f.Concerns(w.attempt), nil
}

// failedForGood returns the run's failure in this attempt when a storage
// root or the rendezvous store holds one.
func (w *worker) failedForGood(ctx context.Context) (storage.Failure, bool) {
	for _, root := range w.roots() {
		if f, marked, _ := storage.FailedForGood(root, w.env.RunName, w.attempt, workerStorage(w.env, w.log)...); marked {
			return f, true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, f, mine, err := w.storedFailure(ctx)
	if err != nil || !mine {
		return storage.Failure{}, false
	}
	return f, true
}

type attemptRecord struct {
	Attempt string `json:"attempt"`
	First   uint64 `json:"first_generation"`
}

// firstGeneration returns the first generation of this attempt at the
// run: the one recorded at AttemptKey, or gen, which it records there in
// place of another attempt's record. When the store cannot tell, it is 1,
// and every generation counts, as if the store were fresh.
func (w *worker) firstGeneration(ctx context.Context, gen uint64) uint64 {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	key := rendezvous.AttemptKey(w.env.RunName)
	mine, err := json.Marshal(attemptRecord{Attempt: w.attempt, First: gen})
	if err != nil {
		return 1
	}
	for range 3 { // a lost compare-and-set: another member of ours won
		v, err := w.store.Get(ctx, key)
		if err != nil {
			break
		}
		var rec attemptRecord
		if v.Version > 0 && json.Unmarshal(v.Data, &rec) == nil && rec.Attempt == w.attempt && rec.First <= gen {
			return rec.First
		}
		_, ok, err := w.store.CompareAndSet(ctx, key, mine, v.Version)
		if err != nil {
			break
		}
		if ok {
			return gen
		}
	}
	w.log.Debug("cannot tell this attempt's first generation; counting from 1")
	return 1
}

// restoreKeys writes back what the run keeps in the rendezvous store
// besides the generation's own keys, once the store lost them (a Consul
// agent restarted empty) during training: the attempt record, without
// which the next generation would count the failure budget from scratch.
// Rank 0's progress comes back with its next report; a failure record is
// not written while the gang trains.
func (w *worker) restoreKeys(ctx context.Context) error {
	// An agent that lost the keys lost this worker's health service too.
	if r, ok := w.hb.(interface{ Reregister() }); ok {
		r.Reregister()
	}
	if w.first == 0 {
		return nil
	}
	b, err := json.Marshal(attemptRecord{Attempt: w.attempt, First: w.first})
	if err != nil {
		return fmt.Errorf("encode attempt record: %w", err)
	}
	// Only where it is absent: another member may have put it back.
	if _, _, err := w.store.CompareAndSet(ctx, rendezvous.AttemptKey(w.env.RunName), b, 0); err != nil {
		return fmt.Errorf("restore attempt record: %w", err)
	}
	return nil
}
