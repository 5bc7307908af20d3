package console

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// download resolves latest, best and a checkpoint's name in the spec's
// run, and copies out the checkpoint it named.
func TestDownloadResolvesNamesInTheSpecsRun(t *testing.T) {
	root := t.TempDir()
	spec, diags := trainspec.Parse([]byte(fmt.Sprintf(`
train "qs" {
  entrypoint { builtin = "quickstart" }
  run {
    storage_path = %q
    checkpoint {
      score_attribute = "loss"
      score_order     = "min"
    }
  }
}
`, root)), "train.hcl", trainspec.ParseOptions{Getenv: os.Getenv})
	must.False(t, diags.HasErrors(), must.Sprint(diags))
	w, err := storage.Open(root, "qs", storage.Policy{})
	must.NoError(t, err)
	for i, loss := range []float64{0.5, 0.2, 0.3} {
		s, err := w.Stage()
		must.NoError(t, err)
		must.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "model.bin"), []byte{byte('a' + i)}, 0o644))
		_, err = w.Commit(s, storage.Record{Step: int64(i), Metrics: map[string]any{"loss": loss}})
		must.NoError(t, err)
	}
	must.NoError(t, w.Close())

	ctx := context.Background()
	for what, want := range map[string]string{"best": "b", "latest": "c", "checkpoint_000000": "a"} {
		dir := filepath.Join(t.TempDir(), "out")
		loc, err := Download(ctx, spec, what, dir, nil)
		must.NoError(t, err, must.Sprint(what))
		must.StrHasSuffix(t, "/qs/checkpoint_00000"+string(rune('0'+want[0]-'a')), loc)
		got, err := os.ReadFile(filepath.Join(dir, "model.bin"))
		must.NoError(t, err)
		must.EqOp(t, want, string(got), must.Sprint(what))
	}

	_, err = Download(ctx, nil, "best", filepath.Join(t.TempDir(), "out"), nil)
	must.ErrorContains(t, err, "add -spec")
	_, err = Download(ctx, spec, "checkpoint_000007", filepath.Join(t.TempDir(), "out"), nil)
	must.ErrorIs(t, err, storage.ErrNoCheckpoint)
	// On a terminal the download shows its progress, and removes it at
	// the end.
	var screen bytes.Buffer
	loc, err := Download(ctx, nil, storage.CheckpointLocation(root, "qs", "checkpoint_000001"), filepath.Join(t.TempDir(), "out"),
		NewLive(&screen, func() (int, int) { return 200, 24 }))
	must.NoError(t, err)
	must.EqOp(t, filepath.Join(root, "qs", "checkpoint_000001"), loc)
	must.StrContains(t, screen.String(), "downloading "+loc)
}

func TestByteSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3565158: "3.4 MiB",
		1288490189: "1.2 GiB", 5 << 40: "5.0 TiB"} {
		must.EqOp(t, want, byteSize(n))
	}
}
