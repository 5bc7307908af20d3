package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// leaseStore returns a store on a fresh bucket of one S3 server.
func leaseStore(t *testing.T, srv *s3test.Server) *objstore.Store {
	t.Helper()
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.NewBucket(t)}, objstore.Config{})
	must.NoError(t, err)
	return st
}

// commitOne stages and commits a one-file checkpoint.
func commitOne(r *ObjectRun, step int64) (string, error) {
	s, err := r.Stage()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), "w.bin"), []byte{byte(step)}, 0o644); err != nil {
		return "", err
	}
	return r.Commit(s, Record{Step: step})
}

// The rank 0 of a new generation takes the writer lease over at once from
// the rank 0 of an earlier generation of the same attempt (whose node was
// lost, in the multi-node proof: it waited up to the 30 s TTL). Every
// other holder is still refused, as a lease that outlives the taker's TTL
// is. The taker's TTL is short so that a refusal is immediate rather than
// a wait.
func TestObjectLeaseTakeover(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	type writer struct {
		attempt string
		gen     uint64
	}
	for _, tc := range []struct {
		name          string
		holder, taker writer
		takes         bool
	}{
		{"same attempt, next generation", writer{"a1", 1}, writer{"a1", 2}, true},
		{"same attempt, much later generation", writer{"a1", 3}, writer{"a1", 9}, true},
		{"same attempt, same generation", writer{"a1", 2}, writer{"a1", 2}, false},
		{"same attempt, earlier generation", writer{"a1", 3}, writer{"a1", 2}, false},
		{"another attempt", writer{"a1", 1}, writer{"a2", 2}, false},
		{"holder of no generation", writer{"a1", 0}, writer{"a1", 2}, false},
		{"holder of no attempt", writer{"", 1}, writer{"a1", 2}, false},
		{"taker of no attempt", writer{"", 1}, writer{"", 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := leaseStore(t, srv)
			old, err := OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(time.Hour), WithWriter(tc.holder.attempt, tc.holder.gen))
			must.NoError(t, err)
			defer old.Close()
			_, err = commitOne(old, 1)
			must.NoError(t, err)
			taker, err := OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(time.Second), WithWriter(tc.taker.attempt, tc.taker.gen))
			if !tc.takes {
				must.ErrorIs(t, err, ErrLocked)
				_, err = commitOne(old, 2)
				must.NoError(t, err, must.Sprint("the holder keeps writing"))
				return
			}
			must.NoError(t, err)
			defer taker.Close()
			// The old holder's next commit finds the lease taken and
			// writes no manifest; every later write fails too.
			_, err = commitOne(old, 2)
			must.ErrorIs(t, err, ErrLocked)
			must.ErrorIs(t, old.Append(Record{Step: 3}), ErrLocked)
			// Its renewal does not overwrite the taker's lease.
			must.ErrorIs(t, old.lease.renew(ctx), ErrLocked)
			cur, _, err := taker.lease.read(ctx)
			must.NoError(t, err)
			must.EqOp(t, taker.lease.holder, cur.Holder)
			must.EqOp(t, tc.taker.gen, cur.Generation)
			name, err := commitOne(taker, 2)
			must.NoError(t, err, must.Sprint("the taker writes"))
			must.EqOp(t, checkpointName(1), name)
			// The old holder's Close leaves the taker's lease alone.
			must.NoError(t, old.Close())
			must.NoError(t, taker.lease.check(ctx))
		})
	}
}

// heldByFirstGeneration opens run "r" on a fresh bucket as generation 1
// of attempt a1, with a lease of an hour.
func heldByFirstGeneration(t *testing.T) (*objstore.Store, *ObjectRun) {
	t.Helper()
	st := leaseStore(t, s3test.Start(t))
	old, err := OpenObject(context.Background(), st, "r", Policy{}, WithLeaseTTL(time.Hour), WithWriter("a1", 1))
	must.NoError(t, err)
	t.Cleanup(func() { old.Close() })
	return st, old
}

// A renewal by a holder whose lease was taken fails its later writes
// even before it commits: the renewal writes only over its own last
// write (If-Match), so it cannot overwrite the taker's lease.
func TestObjectLeaseRenewalFindsTakeover(t *testing.T) {
	ctx := context.Background()
	st, old := heldByFirstGeneration(t)
	must.NoError(t, old.lease.renew(ctx), must.Sprint("a renewal of a lease still held"))
	// A short TTL: refused at once, not after an hour, without the takeover.
	taker, err := OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(time.Second), WithWriter("a1", 2))
	must.NoError(t, err)
	defer taker.Close()
	must.ErrorIs(t, old.lease.renew(ctx), ErrLocked)
	old.lease.fail(old.lease.renew(ctx)) // what the renewal loop does
	must.ErrorIs(t, old.Append(Record{Step: 0}), ErrLocked)
	must.NoError(t, taker.Append(Record{Step: 0}))
	must.NoError(t, taker.lease.renew(ctx))
	must.NoError(t, taker.lease.check(ctx))
}

// A holder whose lease was taken over, and whose next write is a record
// rather than a commit (a fenced-out rank 0 still training), writes no
// segment: one at a step beyond the taker's would sit in the taker's
// history and move a follower's cursor past the taker's next segments.
// Nor does it roll back the taker's records.
func TestObjectLeaseTakenFencesRecords(t *testing.T) {
	ctx := context.Background()
	st, old := heldByFirstGeneration(t)
	for step := range int64(3) {
		must.NoError(t, old.Append(Record{Step: step, Metrics: map[string]any{"gen": 1}}))
	}
	taker, err := OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(time.Hour), WithWriter("a1", 2))
	must.NoError(t, err)
	defer taker.Close()
	must.NoError(t, taker.TruncateAfter(1))
	must.NoError(t, taker.Append(Record{Step: 2, Metrics: map[string]any{"gen": 2}}))

	must.ErrorIs(t, old.Append(Record{Step: 9, Metrics: map[string]any{"gen": 1}}), ErrLocked)
	must.ErrorIs(t, old.TruncateAfter(0), ErrLocked)
	must.NoError(t, taker.Append(Record{Step: 3, Metrics: map[string]any{"gen": 2}}))

	reader, err := OpenObjectReadOnly(ctx, st, "r", Policy{})
	must.NoError(t, err)
	defer reader.Close()
	recs, err := reader.Records()
	must.NoError(t, err)
	var got []string
	for _, rec := range recs {
		got = append(got, fmt.Sprintf("%d/%v", rec.Step, rec.Metrics["gen"]))
	}
	must.Eq(t, []string{"0/1", "1/1", "2/2", "3/2"}, got)
}

// A writer whose lease is taken right after it wrote a manifest (between
// its lease check and its retention, which runs in the background) leaves
// the checkpoints retention would have dropped: they are the new writer's
// now, perhaps the one it falls back to.
func TestObjectLeaseTakenStopsRetention(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	st := leaseStore(t, srv)
	old, err := OpenObject(ctx, st, "r", Policy{NumToKeep: 1}, WithLeaseTTL(time.Hour), WithWriter("a1", 1))
	must.NoError(t, err)
	defer old.Close()
	first, err := commitOne(old, 1)
	must.NoError(t, err)
	var taker *ObjectRun
	hook := func(point string) {
		if point == pointManifested && taker == nil {
			taker, err = OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(time.Hour), WithWriter("a1", 2))
			must.NoError(t, err)
		}
	}
	old.hook.Store(&hook)
	_, err = commitOne(old, 2)
	must.NoError(t, err, must.Sprint("its manifest was written before the takeover"))
	old.Close() // waits for its background work
	defer taker.Close()
	_, err = st.Head(ctx, old.ckptKey(first, ManifestFile))
	must.NoError(t, err, must.Sprintf("%s was deleted by a writer that had lost its lease", first))
}

// Two rank 0s of the same later generation (which the rendezvous never
// makes, but a bug or a replay might) race for a lease of an earlier
// one: the conditional write lets exactly one win; the other waits for
// the winner's lease as for any live holder's.
func TestObjectLeaseTakeoverRace(t *testing.T) {
	srv := s3test.Start(t)
	for i := range 5 {
		ok := t.Run("round", func(t *testing.T) {
			st := leaseStore(t, srv)
			old, err := OpenObject(context.Background(), st, "r", Policy{}, WithLeaseTTL(time.Hour), WithWriter("a1", 1))
			must.NoError(t, err)
			defer old.Close()
			type result struct {
				who int
				r   *ObjectRun
				err error
			}
			parent, stop := context.WithTimeout(context.Background(), 20*time.Second)
			defer stop()
			ctxs := make([]context.Context, 2)
			cancels := make([]context.CancelFunc, 2)
			ch := make(chan result, 2)
			start := make(chan struct{})
			for who := range 2 {
				ctxs[who], cancels[who] = context.WithCancel(parent)
				defer cancels[who]()
				go func() {
					<-start
					r, err := OpenObject(ctxs[who], st, "r", Policy{}, WithLeaseTTL(time.Hour), WithWriter("a1", 2))
					ch <- result{who, r, err}
				}()
			}
			close(start)
			first := <-ch
			var win, lose result
			if first.err == nil {
				win = first
				cancels[1-first.who]() // the loser waits out the winner's hour
				lose = <-ch
			} else {
				lose, win = first, <-ch
			}
			must.NoError(t, win.err, must.Sprintf("round %d: one taker wins", i))
			defer win.r.Close()
			must.Error(t, lose.err, must.Sprintf("round %d: the other does not", i))
			if lose.r != nil {
				lose.r.Close()
			}
			cur, _, err := win.r.lease.read(context.Background())
			must.NoError(t, err)
			must.EqOp(t, win.r.lease.holder, cur.Holder)
			must.NoError(t, win.r.lease.check(context.Background()))
		})
		if !ok {
			break
		}
	}
}
