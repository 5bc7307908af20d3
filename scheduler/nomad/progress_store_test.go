package nomad

import (
	"context"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// The CLI follows a run kept on S3 through the AWS environment alone.
func TestStoreProgressFollowsS3(t *testing.T) {
	srv := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	ctx := context.Background()
	url := "s3://" + srv.Bucket + "/runs"
	p := &StoreProgress{StoragePath: url, Run: "mnist"}
	defer p.Close()
	_, err := p.Latest(ctx)
	must.ErrorIs(t, err, ErrNoProgress)

	st, err := objstore.Open(ctx, url, objstore.Config{})
	must.NoError(t, err)
	w, err := storage.OpenObject(ctx, st, "mnist", storage.Policy{})
	must.NoError(t, err)
	defer w.Close()
	for step := range int64(3) {
		must.NoError(t, w.Append(storage.Record{Step: step, Metrics: map[string]any{"loss": float64(step)}}))
		rec, err := p.Latest(ctx)
		must.NoError(t, err)
		must.EqOp(t, step, rec.Step)
	}
}
