package storage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// segmentKey names the progress segment holding a record: the step, then
// a sequence number, both zero-padded, so that byte order (S3's list
// order) is step order and, within a step, write order.
func (r *ObjectRun) segmentKey(step, seq int64) string {
	return r.key(fmt.Sprintf("%s%020d-%012d.jsonl", objProgressDir, step, seq))
}

// segmentSeq parses the sequence number out of a segment key.
func segmentSeq(key string) (int64, bool) {
	base := key[strings.LastIndexByte(key, '/')+1:]
	base, ok := strings.CutSuffix(base, ".jsonl")
	_, seq, found := strings.Cut(base, "-")
	if !ok || !found {
		return 0, false
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	return n, err == nil
}

// appendSegment writes one record as a segment object, after any segment
// still being written in the background, and after the lease check that
// keeps a writer whose lease was taken over (a fenced-out rank 0 of an
// earlier generation, still running) from adding records behind its
// successor's: such a record, at a step beyond the successor's, would
// also move a follower's cursor past the successor's next segments. mu
// is held.
func (r *ObjectRun) appendSegment(rec Record) error {
	if err := r.waitSegments(); err != nil {
		return err
	}
	if err := r.lease.check(r.ctx); err != nil {
		return fmt.Errorf("appending progress record: %w", err)
	}
	line, key, err := r.nextSegment(rec)
	if err != nil {
		return err
	}
	if _, err := r.st.Put(r.ctx, key, bytes.NewReader(line)); err != nil {
		return fmt.Errorf("appending progress record: %w", err)
	}
	r.addSegment(rec, key)
	r.callHook(pointFlushed)
	return nil
}

// appendSegmentLater adds a record to the writer's view now and writes
// its segment in the background, after the segments before it (so a
// reader's cursor never passes a segment still to come). A checkpoint's
// record goes this way, without a lease check of its own (its manifest's
// has just passed): its manifest, written first, already holds it,
// and a crash before the segment is written leaves OpenObject to rebuild
// it from the manifest. A failed write fails every later write of the
// run, and Close. mu is held.
func (r *ObjectRun) appendSegmentLater(rec Record) error {
	// An earlier write that failed fails this one too, in the background.
	line, key, err := r.nextSegment(rec)
	if err != nil {
		return err
	}
	r.addSegment(rec, key)
	prev, w := r.segs, &segmentWrite{done: make(chan struct{})}
	r.segs = w
	r.bg.Go(func() {
		defer close(w.done)
		if prev != nil {
			if <-prev.done; prev.err != nil {
				w.err = prev.err
				return
			}
		}
		if _, err := r.st.Put(r.ctx, key, bytes.NewReader(line)); err != nil {
			w.err = fmt.Errorf("recording checkpoint %s: %w", rec.Checkpoint, err)
			r.log.Warn("could not write a checkpoint's progress record: the next writer rebuilds it from its manifest",
				"checkpoint", rec.Checkpoint, "error", err)
			return
		}
		r.callHook(pointFlushed)
	})
	return nil
}

// segmentWrite is a progress segment being written in the background.
type segmentWrite struct {
	done chan struct{} // closed when err is set
	err  error
}

// waitSegments waits for the segments being written in the background.
// mu is held (the writes do not take it).
func (r *ObjectRun) waitSegments() error {
	if w := r.segs; w != nil {
		<-w.done
		if w.err != nil {
			return w.err
		}
		r.segs = nil
	}
	return nil
}

// segmentsFailed returns the error of a background segment write that
// failed, without waiting. mu is held.
func (r *ObjectRun) segmentsFailed() error {
	if w := r.segs; w != nil {
		select {
		case <-w.done:
			return w.err
		default:
		}
	}
	return nil
}

// nextSegment encodes a record and takes its segment's key. mu is held.
func (r *ObjectRun) nextSegment(rec Record) (line []byte, key string, err error) {
	if line, err = encodeRecord(rec); err != nil {
		return nil, "", err
	}
	key = r.segmentKey(rec.Step, r.seq)
	r.seq++
	return line, key, nil
}

// addSegment adds a written (or queued) record to the writer's view. mu
// is held.
func (r *ObjectRun) addSegment(rec Record, key string) {
	r.recs, r.keys = append(r.recs, rec), append(r.keys, key)
	r.cursor = key
}

// follow reads the segments written since the last call: a List after
// the last key read, then one Get per new segment. mu is held.
func (r *ObjectRun) follow() error {
	objs, err := r.st.List(r.ctx, objstore.ListOptions{Prefix: r.key(objProgressDir), StartAfter: r.cursor})
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("listing progress: %w", err)
	}
	for _, o := range objs {
		recs, err := r.readSegment(o.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // rolled back by TruncateAfter since the listing
		}
		if err != nil {
			return err
		}
		for _, rec := range recs {
			r.recs, r.keys = append(r.recs, rec), append(r.keys, o.Key)
		}
		if seq, ok := segmentSeq(o.Key); ok && seq >= r.seq {
			r.seq = seq + 1
		}
		r.cursor = o.Key
	}
	return nil
}

// readSegment reads and checks the records of one segment, continuing the
// checks of the segments before it.
func (r *ObjectRun) readSegment(key string) ([]Record, error) {
	rc, _, err := r.st.Get(r.ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var recs []Record
	sc := bufio.NewScanner(io.LimitReader(rc, maxRecordLine*16))
	sc.Buffer(nil, maxRecordLine)
	r.check.path = key
	for sc.Scan() {
		rec, err := r.check.accept(sc.Bytes())
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading progress segment %s: %w", key, err)
	}
	return recs, nil
}

// reload forgets the records and reads them all again. mu is held.
func (r *ObjectRun) reload() error {
	r.recs, r.keys, r.cursor, r.check = nil, nil, "", progressCheck{}
	return r.follow()
}

// TruncateAfter rolls the history back to step: it deletes the segments
// of later records, newest first (a crash leaves a prefix of the
// history), then the checkpoints only the dropped records committed.
func (r *ObjectRun) TruncateAfter(step int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.writable(); err != nil {
		return err
	}
	if err := r.waitSegments(); err != nil {
		return err
	}
	// The segments may be a successor's, if the lease was taken.
	if err := r.lease.check(r.ctx); err != nil {
		return fmt.Errorf("rolling back progress: %w", err)
	}
	cut := len(r.recs)
	for cut > 0 && r.recs[cut-1].Step > step {
		cut--
	}
	if cut == len(r.recs) {
		return nil
	}
	drop := slices.Clone(r.recs[cut:])
	keys := slices.Clone(r.keys[cut:])
	slices.Reverse(keys)
	if err := r.st.DeleteMany(r.ctx, slices.Compact(keys)); err != nil {
		return fmt.Errorf("rolling back progress: %w", err)
	}
	r.recs, r.keys = r.recs[:cut], r.keys[:cut]
	if cut > 0 {
		r.cursor = r.keys[cut-1]
	} else {
		r.cursor = ""
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
