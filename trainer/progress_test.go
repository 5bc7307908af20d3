package trainer

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Rank 0's latest report is readable from the rendezvous store as one
// progress.jsonl line, replaced by each newer report.
func TestPublishProgress(t *testing.T) {
	st := rendezvous.NewMemStore(nil)
	w := &worker{env: workerenv.Env{RunName: "r"}, store: st, log: hclog.NewNullLogger()}
	w.pub = newPublisher(w.putProgress, 0)
	for step := int64(1); step <= 3; step++ {
		w.publishProgress(storage.Record{Step: step, Metrics: map[string]any{"loss": 1.0 / float64(step)}, Checkpoint: "checkpoint_000001"})
	}
	w.pub.close() // what the worker does before it closes the store
	v, err := st.Get(context.Background(), rendezvous.ProgressKey("r"))
	must.NoError(t, err)
	recs, err := storage.ReadProgress(bytes.NewReader(v.Data))
	must.NoError(t, err)
	must.SliceLen(t, 1, recs)
	must.Eq(t, int64(3), recs[0].Step)
	must.Eq(t, "checkpoint_000001", recs[0].Checkpoint)
}

// A run submitted again under the same name (a new secret) finds the last
// attempt's records in a store that kept them (Consul): its failure for
// good does not stop the new attempt, and its generations do not count
// against the new attempt's budget.
func TestAnEarlierAttemptsRecordsDoNotCount(t *testing.T) {
	ctx := context.Background()
	st := rendezvous.NewMemStore(nil)
	attempt := func(secret string) *worker {
		return &worker{env: workerenv.Env{RunName: "r", StoragePath: t.TempDir()}, store: st,
			log: hclog.NewNullLogger(), attempt: storage.AttemptID([]byte(secret))}
	}
	first := attempt("first secret")
	must.Eq(t, 1, first.firstGeneration(ctx, 1))
	must.Eq(t, 1, first.firstGeneration(ctx, 3), must.Sprint("the same attempt counts from its first generation"))
	first.markFailed(errors.New("training function failed"), workerenv.ExitUserError)
	f, failed := first.failedForGood(ctx)
	must.True(t, failed)
	must.Eq(t, "training function failed", f.Reason)

	second := attempt("second secret")
	_, failed = second.failedForGood(ctx)
	must.False(t, failed, must.Sprint("an earlier attempt's failure stopped this one"))
	must.Eq(t, 4, second.firstGeneration(ctx, 4), must.Sprint("an earlier attempt's generations counted"))
	must.Eq(t, 4, second.firstGeneration(ctx, 5))
	second.markFailed(errors.New("failure budget exhausted"), workerenv.ExitBudgetExhausted)
	f, failed = second.failedForGood(ctx)
	must.True(t, failed, must.Sprint("this attempt's failure was not recorded over the earlier one's"))
	must.Eq(t, "failure budget exhausted", f.Reason)
}

type beats []int64

func (b *beats) Beat(step int64)       { *b = append(*b, step) }
func (b *beats) Waiting(string) func() { return func() {} }

// The health check hears of collectives only once restore has set the
// step: the first beat of a resumed run is its step, not 0.
func TestBeatsCarryTheResumedStep(t *testing.T) {
	var got beats
	s := &Session{hb: &got}
	must.NoError(t, s.done(nil)) // restore's own all-gather
	must.SliceEmpty(t, got)
	s.step, s.resumed = 3000, true
	s.beat()
	s.step++
	must.NoError(t, s.done(nil))
	must.Eq(t, beats{3000, 3001}, got)
}
