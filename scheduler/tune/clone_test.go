package tune

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// An exploit whose donor checkpoint turns out corrupt fails, and the
// trial, which goes on from its own checkpoint, still has all it
// trained: its records and checkpoints after the donor's step are rolled
// back only once the copy is ready. With the donor mended the exploit
// goes through and rolls them back.
func TestAFailedExploitLeavesTheTrialItsWork(t *testing.T) {
	t.Run("directory", func(t *testing.T) {
		root := t.TempDir()
		failedExploit(t, root, workerenv.StorageOptions{}, func(name string, broken bool) {
			p := filepath.Join(root, "donor", name, "model.bin")
			body := "donor weights"
			if broken {
				body = "donor weightz"
			}
			must.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		})
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		srv.SetKeysOnly(t)
		cl := srv.Client(t)
		failedExploit(t, "s3://"+srv.Bucket+"/exps", workerenv.StorageOptions{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true},
			func(name string, broken bool) {
				// An object the manifest does not list: a source not as
				// its manifest says is refused.
				in := s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("exps/donor/checkpoints/" + name + "/stray")}
				var err error
				if broken {
					in.Body = strings.NewReader("x")
					_, err = cl.PutObject(context.Background(), &in)
				} else {
					_, err = cl.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: in.Bucket, Key: in.Key})
				}
				must.NoError(t, err)
			})
	})
}

func failedExploit(t *testing.T, where string, so workerenv.StorageOptions, breakDonor func(name string, broken bool)) {
	ctx := context.Background()
	trials := newTrialStore(where, so)
	commit := func(st storage.RunStore, step int64, body string) string {
		s, err := st.Stage()
		must.NoError(t, err)
		must.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "model.bin"), []byte(body), 0o644))
		name, err := st.Commit(s, storage.Record{Step: step, Metrics: map[string]any{"loss": 1 / float64(step)},
			TimeTotal: time.Duration(step) * 10 * time.Second})
		must.NoError(t, err)
		return name
	}
	donor, err := storage.OpenStore(ctx, where, "donor", storage.Policy{}, trials.opts...)
	must.NoError(t, err)
	ckpt := commit(donor, 2, "donor weights")
	must.NoError(t, donor.Close())
	recv, err := storage.OpenStore(ctx, where, "recv", storage.Policy{}, trials.opts...)
	must.NoError(t, err)
	for step := int64(1); step <= 4; step++ {
		commit(recv, step, "its own weights")
	}
	must.NoError(t, recv.Close())

	e := &experiment{ctx: ctx, log: hclog.NewNullLogger(), trials: trials, obj: Objective{Metric: "loss", TimeAttr: TrainingIteration}}
	ts := &TrialState{ID: "recv"}
	breakDonor(ckpt, true)
	must.Error(t, e.cloneInto(ts, &Decision{Donor: "donor"}))
	var trained time.Duration // the latest checkpoint's TimeTotal
	latest := func() (int64, int64, string) {
		st, err := trials.open(ctx, "recv", storage.Policy{})
		must.NoError(t, err)
		defer st.Close()
		recs, err := st.Records()
		must.NoError(t, err)
		res, err := st.LatestIntact()
		must.NoError(t, err)
		must.True(t, res.OK)
		b, err := os.ReadFile(filepath.Join(res.Path, "model.bin"))
		must.NoError(t, err)
		must.EqOp(t, res.Record.TimeTotal, recs[len(recs)-1].TimeTotal)
		trained = res.Record.TimeTotal
		return recs[len(recs)-1].Step, res.Record.Step, string(b)
	}
	last, at, body := latest()
	must.EqOp(t, int64(4), last, must.Sprint("the trial's last record"))
	must.EqOp(t, int64(4), at, must.Sprint("the trial's latest checkpoint"))
	must.EqOp(t, "its own weights", body)
	must.SliceEmpty(t, ts.Exploits)

	breakDonor(ckpt, false)
	must.NoError(t, e.cloneInto(ts, &Decision{Donor: "donor"}))
	last, at, body = latest()
	must.EqOp(t, int64(2), last)
	must.EqOp(t, int64(2), at)
	must.EqOp(t, "donor weights", body)
	must.EqOp(t, 20*time.Second, trained, must.Sprint("the clone carries the time the donor's checkpoint had trained, as Ray restores it"))
	must.Len(t, 1, ts.Exploits)
}
