package trainer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// outageSteps is how many steps the outage test's run trains, each
// reporting a checkpoint.
const outageSteps = 30

// TestTrainsThroughAnS3Outage: the S3 server is killed in the middle of a
// run that commits a checkpoint at every step, and started again 4 s
// later on the same address and data, as a restart of the server looks.
// The workers retry their requests until it is back (the outage grace),
// so the run ends with no restart and every step recorded once. With a
// grace shorter than the outage, the same outage fails the run.
func TestTrainsThroughAnS3Outage(t *testing.T) {
	for _, tc := range []struct {
		name, grace string
		survives    bool
	}{
		{"default grace", "", true},
		{"grace shorter than the outage", "300ms", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, srv := s3Server(t)
			t.Setenv(workerenv.StorageOutageGrace, tc.grace)
			run := trainer.Run{Name: "outage", StoragePath: url}
			back := make(chan struct{})
			if srv != nil {
				go func() {
					defer close(back)
					waitForRecords(t, url, "outage", 5)
					srv.Outage(t, 4*time.Second)
				}()
			}
			res, out, err := fit(t, stepEveryCheckpoint, 2, run, nil)
			<-back
			if !tc.survives {
				must.Error(t, err, must.Sprint(out))
				must.StrContains(t, out, "exceeded maximum number of attempts")
				return
			}
			must.NoError(t, err, must.Sprint(out))
			must.SliceEmpty(t, res.Recovered, must.Sprint("no failure to recover from\n", out))
			must.StrContains(t, out, "object store request failed; retrying", must.Sprint("the run saw the outage"))
			everyStepOnce(t, url, "outage")
		})
	}
}

// stepEveryCheckpoint trains outageSteps steps of 150ms, each reporting
// a checkpoint that holds its step, from the checkpoint it resumes from.
func stepEveryCheckpoint(ctx context.Context, s *trainer.Session) error {
	step := 1
	if ck := s.GetCheckpoint(); ck != nil {
		b, err := os.ReadFile(filepath.Join(ck.Path(), weightsFile))
		if err != nil {
			return err
		}
		if step, err = strconv.Atoi(string(b)); err != nil {
			return err
		}
		step++
	}
	for ; step <= outageSteps; step++ {
		time.Sleep(150 * time.Millisecond)
		if err := reportWeights(ctx, s, strconv.Itoa(step), trainer.Metrics{"step": step}); err != nil {
			return err
		}
	}
	return nil
}

// everyStepOnce checks that run on S3 recorded each of outageSteps steps
// once, in order, and that its latest checkpoint is the last step's.
func everyStepOnce(t *testing.T, url, run string) {
	t.Helper()
	st, err := storage.OpenStoreReadOnly(context.Background(), url, run, storage.Policy{}, storage.WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	defer st.Close()
	recs, err := st.Records()
	must.NoError(t, err)
	steps := make([]string, len(recs))
	for i, r := range recs {
		steps[i] = fmt.Sprint(r.Step)
	}
	must.Len(t, outageSteps, recs, must.Sprint(strings.Join(steps, " ")))
	for i, r := range recs {
		must.EqOp(t, int64(i+1), r.Step, must.Sprint("every step once, in order"))
	}
	latest, err := st.LatestIntact()
	must.NoError(t, err)
	must.EqOp(t, int64(outageSteps), latest.Record.Step)
}

// TestTrainsThroughASilentStore: mid-run, the S3 server falls silent to
// the workers (a relay between them stops carrying bytes, refusing and
// resetting nothing, as when a server is lost behind a load balancer),
// and 3 s later new connections reach it again while the old ones stay
// dead. The workers' requests on dead connections fail after the stall
// timeout and are retried on new ones, so the run ends with no restart
// and every step recorded once. (With a stall timeout past the progress
// watchdog's limit, the gang hangs on its uploads until the watchdog
// re-forms it, spending a failure; without the watchdog, for as long as
// the kernel keeps the dead connections.)
func TestTrainsThroughASilentStore(t *testing.T) {
	url, srv := s3Server(t)
	t.Setenv(workerenv.StorageStallTimeout, "500ms")
	run := trainer.Run{Name: "silent", StoragePath: url}
	mended := make(chan struct{})
	if srv != nil {
		relay := s3test.NewRelay(t, srv.Endpoint)
		t.Setenv("AWS_ENDPOINT_URL_S3", relay.Endpoint)
		go func() {
			defer close(mended)
			waitForRecords(t, url, "silent", 5)
			relay.Cut()
			time.Sleep(3 * time.Second)
			relay.Mend()
		}()
	}
	res, out, err := fit(t, stepEveryCheckpoint, 2, run, nil)
	<-mended
	must.NoError(t, err, must.Sprint(out))
	must.SliceEmpty(t, res.Recovered, must.Sprint("no failure to recover from\n", out))
	must.StrNotContains(t, out, "gang lost a member")
	must.StrContains(t, out, "connection stalled", must.Sprint("the run saw the stall"))
	everyStepOnce(t, url, "silent")
}

// waitForRecords waits until run on S3 has at least n records.
func waitForRecords(t *testing.T, url, run string, n int) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st, err := storage.OpenStoreReadOnly(context.Background(), url, run, storage.Policy{}, storage.WithLocalDir(t.TempDir()))
		if err == nil {
			recs, _ := st.Records()
			st.Close()
			if len(recs) >= n {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("run %s never had %d records", run, n)
}

// The S3 server goes down as the workers end, before Fit reads the run's
// Result from it: Fit waits for it to come back, as the workers would
// have, and returns the Result rather than an error for a run that
// finished and whose records are safe.
func TestFitReadsItsResultThroughAnS3Outage(t *testing.T) {
	url, srv := s3Server(t)
	fn := func(ctx context.Context, s *trainer.Session) error {
		return reportWeights(ctx, s, "final", trainer.Metrics{"loss": 0.25})
	}
	back := make(chan struct{})
	if srv != nil {
		trainer.SetBeforeResult(t, func() {
			go func() {
				defer close(back)
				srv.Outage(t, 3*time.Second)
			}()
			time.Sleep(300 * time.Millisecond) // the server is down
		})
	}
	res, out, err := fit(t, fn, 2, trainer.Run{Name: "result", StoragePath: url}, nil)
	<-back
	must.NoError(t, err, must.Sprint(out))
	must.EqOp(t, 0.25, res.Metrics["loss"])
	must.NotNil(t, res.Checkpoint)
	must.StrHasPrefix(t, url+"/result/checkpoints/checkpoint_", res.Checkpoint.Path())
}
