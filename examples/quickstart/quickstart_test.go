package quickstart_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/examples/quickstart"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// finalLossBound: the noise has variance 0.01, so a fitted model's MSE sits
// near 0.01; an untrained one is above 1.
const finalLossBound = 0.05

func fit(t *testing.T, storagePath string, cfg quickstart.Config) (*trainer.Result, string) {
	t.Helper()
	t.Setenv("GORACE", "atexit_sleep_ms=0") // workers under -race exit at once
	tr := trainer.New(quickstart.Train, trainer.Scaling{NumWorkers: 4},
		trainer.Run{Name: "quickstart", StoragePath: storagePath,
			Checkpoint: trainer.CheckpointConfig{NumToKeep: 2, ScoreAttribute: "loss", ScoreOrder: "min"}},
		cfg)
	tr.Args = []string{"-test.run=^" + t.Name() + "$"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := tr.Fit(ctx)
	must.NoError(t, err, must.Sprint(out.String()))
	return res, out.String()
}

// The quick start trains end to end on 4 worker processes, keeps the two
// best checkpoints, and a second run with more epochs resumes from the
// latest one instead of starting over.
func TestQuickstartEndToEnd(t *testing.T) {
	dir := t.TempDir()
	res, out := fit(t, dir, quickstart.DefaultConfig())
	loss := res.Metrics["loss"].(float64)
	t.Logf("final loss %.6f", loss)
	must.Less(t, finalLossBound, loss, must.Sprint(out))
	must.StrContains(t, out, "[rank 0] epoch 9: loss")
	must.NotNil(t, res.Checkpoint)
	must.Len(t, 2, res.BestCheckpoints)
	must.FileExists(t, filepath.Join(res.Checkpoint.Path(), "model.bin"))

	st, err := storage.Open(dir, "quickstart", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	st.Close()
	must.NoError(t, err)
	must.Len(t, 10, recs)

	cfg := quickstart.DefaultConfig()
	cfg.Epochs = 12
	res, out = fit(t, dir, cfg)
	must.StrContains(t, out, "[rank 0] resuming after epoch 9")
	must.StrNotContains(t, out, "epoch 0: loss")
	must.StrContains(t, out, "[rank 0] epoch 11: loss")
	must.Less(t, finalLossBound, res.Metrics["loss"].(float64))
}
