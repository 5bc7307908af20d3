package console

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// The summary of a run on Nomad reads its S3 storage with the spec's
// storage block, as the workers do: the environment here holds the keys
// alone, and the best checkpoint is still found.
func TestNomadSummaryReadsS3WithSpecOptions(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeysOnly(t)
	root := "s3://" + srv.Bucket + "/runs"
	spec, diags := trainspec.Parse([]byte(fmt.Sprintf(`
train "qs" {
  entrypoint { builtin = "quickstart" }
  run {
    storage {
      path       = %q
      endpoint   = %q
      region     = %q
      path_style = true
    }
    checkpoint {
      score_attribute = "loss"
      score_order     = "min"
    }
  }
}
`, root, srv.Endpoint, srv.Region)), "train.hcl", trainspec.ParseOptions{Getenv: os.Getenv})
	must.False(t, diags.HasErrors(), must.Sprint(diags))

	w, err := storage.OpenStore(context.Background(), root, "qs", storage.Policy{},
		storage.WithStorageOptions(spec.Run.Storage.Options()), storage.WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	for i, loss := range []float64{0.5, 0.2, 0.3} {
		s, err := w.Stage()
		must.NoError(t, err)
		must.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "model.bin"), []byte{byte(i)}, 0o644))
		_, err = w.Commit(s, storage.Record{Step: int64(i), Metrics: map[string]any{"loss": loss}})
		must.NoError(t, err)
	}
	must.NoError(t, w.Close())

	s := nomadSummary(spec, nomad.RunResult{}, storage.Record{}, 0)
	must.EqOp(t, storage.CheckpointLocation(root, "qs", "checkpoint_000001"), s.Best)
	must.EqOp(t, "loss=0.2", s.Score)
}
