package trainer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// trainer.Run.Storage names the S3 server of an s3:// StoragePath for the
// Go API as the storage block does for train.hcl: the environment holds
// only the keys, and the launcher, the workers and LoadResult all reach
// the server through the options.
func TestFitOnS3WithStorageOptions(t *testing.T) {
	run := trainer.Run{Name: "s3opts"}
	if !workerenv.IsWorker() { // the workers take the run from their environment
		srv := s3test.Start(t)
		for k, v := range map[string]string{
			"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey,
			"AWS_ENDPOINT_URL_S3": "", "AWS_ENDPOINT_URL": "", "AWS_REGION": "", "AWS_PROFILE": "",
			"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
			"AWS_EC2_METADATA_DISABLED": "true",
		} {
			t.Setenv(k, v)
		}
		run.StoragePath = "s3://" + srv.Bucket + "/runs"
		run.Storage = workerenv.StorageOptions{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}
	}
	fn := func(ctx context.Context, s *trainer.Session) error {
		var ck *trainer.Checkpoint
		if s.WorldRank() == 0 {
			dir, err := s.NewCheckpointDir()
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "w.bin"), []byte("weights"), 0o644); err != nil {
				return err
			}
			ck = trainer.CheckpointFromDirectory(dir)
		}
		return s.Report(ctx, trainer.Metrics{"loss": 0.5}, ck)
	}
	res, out, err := fit(t, fn, 2, run, nil)
	must.NoError(t, err, must.Sprint(out))
	must.NotNil(t, res.Checkpoint, must.Sprint(out))
	must.StrHasPrefix(t, run.StoragePath+"/s3opts/checkpoints/checkpoint_", res.Checkpoint.Path())
	must.EqOp(t, 0.5, res.Metrics["loss"])

	// The Result's checkpoint keeps the run's options, so it is copied out
	// of a server the environment does not name; the same location taken
	// by hand, without them, finds no region to sign for.
	dst := filepath.Join(t.TempDir(), "model")
	must.NoError(t, res.Checkpoint.ToDirectory(context.Background(), dst))
	got, err := os.ReadFile(filepath.Join(dst, "w.bin"))
	must.NoError(t, err)
	must.EqOp(t, "weights", string(got))
	err = trainer.CheckpointFromDirectory(res.Checkpoint.Path()).ToDirectory(context.Background(), filepath.Join(t.TempDir(), "m"))
	must.ErrorIs(t, err, objstore.ErrNoRegion)
}
