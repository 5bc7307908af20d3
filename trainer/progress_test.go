package trainer

import (
	"bytes"
	"context"
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
	v, err := st.Get(context.Background(), "r/progress")
	must.NoError(t, err)
	recs, err := storage.ReadProgress(bytes.NewReader(v.Data))
	must.NoError(t, err)
	must.SliceLen(t, 1, recs)
	must.Eq(t, int64(3), recs[0].Step)
	must.Eq(t, "checkpoint_000001", recs[0].Checkpoint)
}
