package trainer

import (
	"context"
	"fmt"
	"sync"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// writeQueue runs rank 0's storage writes (commits and records) one at a
// time, in the order given, on one goroutine of its own: with
// asynchronous uploads a report returns while they go on. The first
// failure sticks: the writes after it are skipped, and every later report
// is told.
type writeQueue struct {
	ops  chan func() error
	done chan struct{} // closed when the goroutine ends

	mu sync.Mutex
	// Guarded by mu:
	queued    int // ops given and not finished
	idle      *sync.Cond
	err       error    // the first failure
	committed []string // checkpoints written since last taken
}

func newWriteQueue() *writeQueue {
	q := &writeQueue{ops: make(chan func() error, 64), done: make(chan struct{})}
	q.idle = sync.NewCond(&q.mu)
	go q.loop()
	return q
}

func (q *writeQueue) loop() {
	defer close(q.done)
	for op := range q.ops {
		q.mu.Lock()
		failed := q.err != nil
		q.mu.Unlock()
		var err error
		if !failed {
			err = op()
		}
		q.mu.Lock()
		if err != nil && q.err == nil {
			q.err = err
		}
		q.queued--
		if q.queued == 0 {
			q.idle.Broadcast()
		}
		q.mu.Unlock()
	}
}

// submit queues a write.
func (q *writeQueue) submit(op func() error) {
	q.mu.Lock()
	q.queued++
	q.mu.Unlock()
	q.ops <- op
}

// commitDone notes a checkpoint written, for the next report to announce.
func (q *writeQueue) commitDone(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.committed = append(q.committed, name)
}

// wait blocks until every queued write has finished, or ctx ends, and
// returns the first failure.
func (q *writeQueue) wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.idle.Broadcast()
	})
	defer stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.queued > 0 && ctx.Err() == nil {
		q.idle.Wait()
	}
	if q.err != nil {
		return q.err
	}
	return ctx.Err()
}

// state takes the checkpoints written since the last call and returns
// them with the first failure.
func (q *writeQueue) state() ([]string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.committed
	q.committed = nil
	return c, q.err
}

// close lets the queued writes finish (each is bounded by the store's
// context) and ends the goroutine.
func (q *writeQueue) close() {
	close(q.ops)
	<-q.done
}

// upload is one rank's upload of its files of a checkpoint to an object
// store, in the background when uploads are asynchronous.
type upload struct {
	name string
	done chan struct{} // closed when res is set
	res  uploadResult
	sent bool // res was told to rank 0 (owned by the training goroutine)
}

// startUpload uploads dir's files as this rank's part of checkpoint name
// (see RankStore.Upload). Rank 0's small files stay in dir for its
// manifest to carry (RankStore.UploadLarge).
func startUpload(rs *storage.RankStore, name, dir string, rank int) *upload {
	u := &upload{name: name, done: make(chan struct{})}
	go func() {
		defer close(u.done)
		var files []storage.FileSum
		var err error
		if rank == 0 {
			var own storage.InlineFiles
			files, own, err = rs.UploadLarge(name, dir)
			u.res.Own = &own
		} else {
			files, err = rs.Upload(name, dir)
		}
		u.res.Name, u.res.Files = name, files
		if err != nil {
			u.res.Err = err.Error()
		}
	}()
	return u
}

// wait blocks until the upload ends or ctx does.
func (u *upload) wait(ctx context.Context) error {
	select {
	case <-u.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the upload of checkpoint %s: %w", u.name, ctx.Err())
	}
}

// finished reports whether the upload has ended.
func (u *upload) finished() bool {
	select {
	case <-u.done:
		return true
	default:
		return false
	}
}
