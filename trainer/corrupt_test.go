package trainer_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// copyDir copies a run directory, so that each case damages its own.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	must.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	}))
}

// TestFallsBackFromCorruptCheckpoint: a run whose latest checkpoint was
// damaged on disk (cut, a flipped byte, an edited meta.json, a file
// missing, a file added) used to restore it, and the training function's
// failure to load it marked the run failed for good (an edit went unseen).
// Now the restart finds the damage, says so, restores the checkpoint
// before it and finishes with the parameters of an undamaged run; the
// damaged checkpoint is kept aside.
func TestFallsBackFromCorruptCheckpoint(t *testing.T) {
	storageDir := t.TempDir()
	clean, out, err := fit(t, ftTrain, 1, trainer.Run{Name: "clean", StoragePath: storageDir}, nil)
	must.NoError(t, err, must.Sprint(out))
	want, err := os.ReadFile(filepath.Join(clean.Checkpoint.Path(), "model.bin"))
	must.NoError(t, err)
	latest := filepath.Base(clean.Checkpoint.Path())

	damage := []struct {
		name string
		do   func(dir string) error
	}{
		{"truncated", func(dir string) error { return os.Truncate(filepath.Join(dir, "model.bin"), 10) }},
		{"flipped byte", func(dir string) error {
			p := filepath.Join(dir, "model.bin")
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0x40
			return os.WriteFile(p, b, 0o644)
		}},
		{"edited meta", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "meta.json"), []byte("28\n"), 0o644)
		}},
		{"missing file", func(dir string) error { return os.Remove(filepath.Join(dir, "model.bin")) }},
		{"extra file", func(dir string) error { return os.WriteFile(filepath.Join(dir, "extra"), []byte("x"), 0o644) }},
	}
	for _, d := range damage {
		t.Run(d.name, func(t *testing.T) {
			name := "damaged"
			dir := filepath.Join(storageDir, name)
			os.RemoveAll(dir)
			copyDir(t, filepath.Join(storageDir, "clean"), dir)
			must.NoError(t, d.do(filepath.Join(dir, latest)))

			res, out, err := fit(t, ftTrain, 1, trainer.Run{Name: name, StoragePath: storageDir}, nil)
			must.NoError(t, err, must.Sprint(out))
			must.StrContains(t, out, "checkpoint is corrupt", must.Sprint("the fallback is logged"))
			must.StrContains(t, out, latest)
			got, err := os.ReadFile(filepath.Join(res.Checkpoint.Path(), "model.bin"))
			must.NoError(t, err)
			must.True(t, bytes.Equal(want, got), must.Sprint("parameters after the fallback differ from the undamaged run"))

			st, err := storage.OpenReadOnly(storageDir, name, storage.Policy{})
			must.NoError(t, err)
			recs, err := st.Records()
			must.NoError(t, err)
			must.SliceLen(t, ftEpochs, recs)
			for i, r := range recs {
				must.Eq(t, float64(i), r.Metrics["epoch"].(float64), must.Sprintf("record %d", i))
			}
			must.DirExists(t, filepath.Join(dir, latest+".corrupt"), must.Sprint("the damaged checkpoint is kept"))
		})
	}
}

// TestReportRefusesForeignCheckpointDir: a rank that reports a directory
// outside its own checkpoint directories (here, a stranger's files outside
// the run) used to have rank 0 move those files into the checkpoint and
// delete the directory. Now the report fails with an error naming the
// path, the run fails at once (the training function's mistake, which no
// restart fixes), and nothing outside the run is touched.
func TestReportRefusesForeignCheckpointDir(t *testing.T) {
	stranger := sharedDir(t, "FOREIGN_CKPT_DIR")
	precious := filepath.Join(stranger, "precious.txt")
	if err := os.WriteFile(precious, []byte("not yours"), 0o644); err != nil {
		t.Fatal(err)
	}
	train := func(ctx context.Context, s *trainer.Session) error {
		var ck *trainer.Checkpoint
		if s.WorldRank() == 1 {
			ck = trainer.CheckpointFromDirectory(os.Getenv("FOREIGN_CKPT_DIR"))
		}
		return s.Report(ctx, trainer.Metrics{"x": 1}, ck)
	}
	res, out, err := fit(t, train, 2, trainer.Run{Name: "foreign", Failure: trainer.FailureConfig{MaxFailures: 3}}, nil)
	must.ErrorIs(t, err, trainer.ErrRunFailed)
	must.StrContains(t, out, "rank 1 reported checkpoint directory "+stranger)
	must.SliceEmpty(t, res.Recovered, must.Sprint("a mistake of the training function is not retried"))
	b, err := os.ReadFile(precious)
	must.NoError(t, err, must.Sprint("the stranger's file is where it was"))
	must.Eq(t, "not yours", string(b))
}
