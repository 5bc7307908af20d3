package trainer

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Rank 0 of a new generation opens the run's S3 storage at once although
// rank 0 of the previous generation (its node lost) left its writer lease
// behind: the session names itself to the store by attempt and
// generation. It used to wait for that lease to expire (24 s of B10's 24.4
// s in the multi-node proof); here the lease outlives the default TTL, so
// the old code was refused outright. Another attempt's lease still is.
func TestNewGenerationTakesOverWriterLease(t *testing.T) {
	srv := s3test.Start(t)
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey,
		"AWS_REGION": srv.Region, "AWS_ENDPOINT_URL_S3": srv.Endpoint,
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
		"TMPDIR": t.TempDir(),
	} {
		t.Setenv(k, v)
	}
	for _, tc := range []struct {
		name    string
		attempt string
		takes   bool
	}{
		{"same attempt", "a1", true},
		{"another attempt", "a2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			env := workerenv.Env{StoragePath: "s3://" + srv.NewBucket(t) + "/runs", RunName: "r"}
			// Generation 1's rank 0, whose node is lost: its lease stays.
			_, err := storage.OpenStore(ctx, env.StoragePath, env.RunName, storage.Policy{},
				storage.WithWriter("a1", 1), storage.WithLeaseTTL(time.Hour), storage.WithLocalDir(t.TempDir()))
			must.NoError(t, err)
			s := &Session{size: 1, generation: 2, attempt: tc.attempt, log: hclog.NewNullLogger()}
			rp := s.openStorage(ctx, env)
			if !tc.takes {
				must.StrContains(t, rp.Err, "locked")
				return
			}
			must.EqOp(t, "", rp.Err)
			must.NoError(t, s.store.Append(storage.Record{Step: 1}))
			must.NoError(t, s.store.Close())
		})
	}
}
