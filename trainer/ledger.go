package trainer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// ledger is rank 0's order of writes. Records reach storage in step
// order, and a checkpoint's record only with (after) its manifest, once
// every rank that contributed files has said how its upload went. With
// asynchronous uploads those answers come with later reports, so a
// report's record may wait here behind a checkpoint still uploading. The
// ledger does no I/O: it says what is ready to be written, in order.
type ledger struct {
	queue []*entry
}

// entry is one report waiting to be written.
type entry struct {
	rec    storage.Record  // its Checkpoint is empty: Commit names it
	ckpt   string          // reserved checkpoint name (object store); "" otherwise
	staged *storage.Staged // a checkpoint on a directory: every rank's files, moved
	// waiting holds the ranks whose upload of ckpt has not been heard of.
	waiting map[int]bool
	files   []storage.FileSum
	own     storage.InlineFiles // rank 0's files its manifest carries
	failed  []string            // "rank N: why", by rank
}

// uploadResult is how one rank's upload of a checkpoint went.
type uploadResult struct {
	Name  string            `json:"name"`
	Files []storage.FileSum `json:"files,omitempty"`
	// Own is rank 0's: its files left for the manifest to carry.
	Own *storage.InlineFiles `json:"own,omitempty"`
	Err string               `json:"err,omitempty"`
}

// add queues a report.
func (l *ledger) add(e *entry) { l.queue = append(l.queue, e) }

// heard records rank's result for a queued checkpoint; a result for a
// checkpoint the ledger no longer holds (one already failed) is ignored.
func (l *ledger) heard(rank int, res uploadResult) {
	for _, e := range l.queue {
		if e.ckpt != res.Name || !e.waiting[rank] {
			continue
		}
		delete(e.waiting, rank)
		if res.Err != "" {
			e.failed = append(e.failed, fmt.Sprintf("rank %d: %s", rank, res.Err))
			slices.Sort(e.failed)
		} else {
			e.files = append(e.files, res.Files...)
		}
		if rank == 0 && res.Own != nil {
			e.own = *res.Own
		}
		return
	}
}

// dropped is a checkpoint the ledger gave up: its name, and the directory
// rank 0 left for its manifest ("" if none).
type dropped struct{ name, own string }

// ready pops the entries at the front whose writes may go now. A
// checkpoint some rank failed to upload ends the queue: it and every
// report behind it are dropped (the gang restarts from the latest
// checkpoint, and rolls back the records after it anyway), and the
// failure is returned with the dropped checkpoints.
func (l *ledger) ready() (out []*entry, gone []dropped, err error) {
	for len(l.queue) > 0 {
		e := l.queue[0]
		if len(e.failed) > 0 {
			for _, d := range l.queue {
				if d.ckpt != "" {
					gone = append(gone, dropped{d.ckpt, d.own.Dir})
				}
				if d.staged != nil {
					d.staged.Abort()
				}
			}
			l.queue = nil
			return out, gone, fmt.Errorf("uploading checkpoint %s failed on %s", e.ckpt, strings.Join(e.failed, "; "))
		}
		if len(e.waiting) > 0 {
			return out, nil, nil
		}
		out = append(out, e)
		l.queue = l.queue[1:]
	}
	return out, nil, nil
}

// pending says whether anything is queued.
func (l *ledger) pending() bool { return len(l.queue) > 0 }
