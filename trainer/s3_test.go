package trainer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// s3Storage starts a real S3 server for the test (in the launching
// process; its workers find it in the environment) and returns the
// storage path of a bucket on it.
func s3Storage(t testing.TB) string {
	t.Helper()
	url, _ := s3Server(t)
	return url
}

// s3Server is s3Storage, with the server (nil in a worker process).
func s3Server(t testing.TB) (string, *s3test.Server) {
	t.Helper()
	if url := os.Getenv("TRAINER_TEST_S3_URL"); url != "" {
		return url, nil // a worker process
	}
	srv := s3test.Start(t)
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey,
		"AWS_REGION": srv.Region, "AWS_ENDPOINT_URL_S3": srv.Endpoint,
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
	} {
		t.Setenv(k, v)
	}
	url := "s3://" + srv.Bucket + "/runs"
	t.Setenv("TRAINER_TEST_S3_URL", url)
	t.Setenv("B6A_SERVER_PID", strconv.Itoa(srv.PID)) // B6a reads the server's CPU time
	return url, srv
}

// twoNodes puts ranks 0 and 1 on one simulated node and the others on a
// second, each with its own cache directory, as workers on two machines.
func twoNodes(t *testing.T) {
	nodes := [2]string{sharedDir(t, "S3_NODE_A"), sharedDir(t, "S3_NODE_B")}
	trainer.SetNodeCaches(func(rank int) string { return nodes[min(rank/2, 1)] })
}

// rankFile is what rank writes in its part of the checkpoint of step.
func rankFile(rank int, step int64) (string, string) {
	return fmt.Sprintf("rank-%d.bin", rank), fmt.Sprintf("rank %d step %d", rank, step)
}

// reportRankFiles reports a checkpoint of which every rank wrote its own
// file.
func reportRankFiles(ctx context.Context, s *trainer.Session, step int64) error {
	dir, err := s.NewCheckpointDir()
	if err != nil {
		return err
	}
	name, content := rankFile(s.WorldRank(), step)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		return err
	}
	return s.Report(ctx, trainer.Metrics{"at": step}, trainer.CheckpointFromDirectory(dir))
}

// checkRankFiles checks that dir holds every rank's file of step.
func checkRankFiles(dir string, world int, step int64) error {
	for r := range world {
		name, want := rankFile(r, step)
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			return fmt.Errorf("%s: %q (%v), want %q", name, got, err, want)
		}
	}
	return nil
}

func latestOnS3(t *testing.T, url, run string) storage.Restore {
	t.Helper()
	st, err := storage.OpenStoreReadOnly(context.Background(), url, run, storage.Policy{}, storage.WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	defer st.Close()
	res, err := st.LatestIntact()
	must.NoError(t, err)
	return res
}

// TestRanksUploadTheirOwnFiles: four workers on two simulated nodes,
// which share no directory, each upload their own checkpoint files to S3;
// the resumed run finds every rank's files on every rank, and each node
// downloaded the checkpoint once for its two ranks.
func TestRanksUploadTheirOwnFiles(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			url := s3Storage(t)
			twoNodes(t)
			t.Setenv("NOMAD_TRAIN_LOG_LEVEL", "info") // the downloads are logged
			run := trainer.Run{Name: "ranks", StoragePath: url, Checkpoint: trainer.CheckpointConfig{AsyncUpload: trainer.Async(async)}}
			const world = 4
			// One function for both runs: a worker runs the test's first
			// Fit with it. The second run resumes, and checks.
			fn := func(ctx context.Context, s *trainer.Session) error {
				if ck := s.GetCheckpoint(); ck != nil {
					return checkRankFiles(ck.Path(), world, 2)
				}
				for step := int64(1); step <= 2; step++ {
					if err := reportRankFiles(ctx, s, step); err != nil {
						return err
					}
				}
				return nil
			}
			_, out, err := fit(t, fn, world, run, nil)
			must.NoError(t, err, must.Sprint(out))
			res := latestOnS3(t, url, "ranks")
			must.True(t, res.OK)
			must.EqOp(t, 2, res.Record.Step)
			must.NoError(t, checkRankFiles(res.Path, world, 2))

			_, out, err = fit(t, fn, world, run, nil)
			must.NoError(t, err, must.Sprint(out))
			must.EqOp(t, 2, strings.Count(out, "downloaded the checkpoint to resume from for this node"), must.Sprint(out))
		})
	}
}

// TestNodeCachesAreSwept: a run's workers hold their node's cache while
// they train, so that no sweep removes it, and leave it to age once they
// have ended; the node's first rank sweeps the caches other runs left
// unused for a day as it starts.
func TestNodeCachesAreSwept(t *testing.T) {
	url := s3Storage(t)
	twoNodes(t)
	nodeA := filepath.Join(sharedDir(t, "S3_NODE_A"), fmt.Sprintf("nomad-train-%d", os.Getuid()))
	if !workerenv.IsWorker() {
		// The launching test: a cache another run left a day and more ago.
		must.NoError(t, os.MkdirAll(filepath.Join(nodeA, "left-0123456789ab", "checkpoint_000000"), 0o700))
		day := time.Now().Add(-storage.NodeCacheIdle - time.Minute)
		must.NoError(t, os.Chtimes(filepath.Join(nodeA, "left-0123456789ab"), day, day))
	}
	later := time.Now().Add(2 * storage.NodeCacheIdle)
	fn := func(ctx context.Context, s *trainer.Session) error {
		if err := reportRankFiles(ctx, s, 1); err != nil {
			return err
		}
		if s.WorldRank() != 0 {
			return nil
		}
		if _, err := os.Stat(filepath.Join(nodeA, "left-0123456789ab")); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the cache left a day ago is still there (%v)", err)
		}
		removed, err := storage.SweepNodeCaches(nodeA, later, storage.NodeCacheIdle)
		if err != nil || len(removed) > 0 {
			return fmt.Errorf("a sweep while the run trains removed %v (%v)", removed, err)
		}
		return nil
	}
	_, out, err := fit(t, fn, 4, trainer.Run{Name: "swept", StoragePath: url}, nil)
	must.NoError(t, err, must.Sprint(out))
	own := filepath.Base(storage.NodeCacheDir(nodeA, url, "swept"))
	removed, err := storage.SweepNodeCaches(nodeA, time.Now(), storage.NodeCacheIdle)
	must.NoError(t, err)
	must.SliceEmpty(t, removed, must.Sprint("used just now"))
	removed, err = storage.SweepNodeCaches(nodeA, later, storage.NodeCacheIdle)
	must.NoError(t, err)
	must.Eq(t, []string{own}, removed, must.Sprint("released when the run ended"))
}

// asyncRun is a run on S3 with asynchronous uploads.
func asyncRun(t *testing.T, name string, maxFailures int) (trainer.Run, string) {
	url := s3Storage(t)
	return trainer.Run{Name: name, StoragePath: url,
		Checkpoint: trainer.CheckpointConfig{AsyncUpload: trainer.Async(true)},
		Failure:    trainer.FailureConfig{MaxFailures: maxFailures}}, url
}

// TestAsyncUploadFailureFailsNextReport: one rank's upload of the second
// checkpoint fails (a file name a checkpoint may not hold); that Report
// has returned, and the next one fails on every rank, naming that rank.
// The first checkpoint stays the latest; nothing of the second is
// recorded. Rank 0's own upload is taken by its write, not told by a
// later report (TestAsyncPeerLostKeepsReportedCheckpoint), and fails the
// next report all the same.
func TestAsyncUploadFailureFailsNextReport(t *testing.T) {
	for _, bad := range []int{1, 0} {
		t.Run(fmt.Sprintf("rank %d", bad), func(t *testing.T) { asyncUploadFailure(t, bad) })
	}
}

func asyncUploadFailure(t *testing.T, bad int) {
	name := fmt.Sprintf("upfail%d", bad)
	run, url := asyncRun(t, name, 0)
	fn := func(ctx context.Context, s *trainer.Session) error {
		if err := reportRankFiles(ctx, s, 1); err != nil {
			return err
		}
		dir, err := s.NewCheckpointDir()
		if err != nil {
			return err
		}
		if s.WorldRank() == bad {
			if err := os.WriteFile(filepath.Join(dir, storage.ManifestFile+".corrupt"), nil, 0o644); err != nil {
				return err
			}
		}
		if err := s.Report(ctx, nil, trainer.CheckpointFromDirectory(dir)); err != nil {
			return fmt.Errorf("the report of a checkpoint still uploading failed: %w", err)
		}
		err = reportRankFiles(ctx, s, 3) // waits for the upload before
		if !errors.Is(err, trainer.ErrReport) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d: ", bad)) || !strings.Contains(err.Error(), "reserved name") {
			return fmt.Errorf("the report after a failed upload: got %v, want it to fail naming rank %d", err, bad)
		}
		return nil
	}
	_, out, err := fit(t, fn, 2, run, nil)
	must.NoError(t, err, must.Sprint(out))
	res := latestOnS3(t, url, name)
	must.EqOp(t, 1, res.Record.Step)
	must.NoError(t, checkRankFiles(res.Path, 2, 1))
	st, err := storage.OpenStoreReadOnly(context.Background(), url, name, storage.Policy{})
	must.NoError(t, err)
	defer st.Close()
	recs, err := st.Records()
	must.NoError(t, err)
	for _, r := range recs {
		must.True(t, r.Checkpoint == "" || r.Step == 1, must.Sprintf("record %+v names a checkpoint that was never committed", r))
	}
}

// TestAsyncUploadFinishesAtEnd: a training function that returns right
// after reporting a checkpoint still has its upload (or, on a directory,
// its commit) going; the workers finish it, manifest and record, before
// they exit.
func TestAsyncUploadFinishesAtEnd(t *testing.T) {
	for _, kind := range []string{"s3", "dir"} {
		t.Run(kind, func(t *testing.T) {
			run, url := asyncRun(t, "atend", 0)
			if kind == "dir" {
				url = sharedDir(t, "S3_ATEND_DIR")
				run.StoragePath = url
			}
			twoNodes(t)
			_, out, err := fit(t, func(ctx context.Context, s *trainer.Session) error {
				for step := int64(1); step <= 3; step++ {
					if err := reportRankFiles(ctx, s, step); err != nil {
						return err
					}
				}
				return nil
			}, 4, run, nil)
			must.NoError(t, err, must.Sprint(out))
			res := latestOnS3(t, url, "atend")
			must.True(t, res.OK, must.Sprint("the pending upload was committed"))
			must.EqOp(t, 3, res.Record.Step)
			must.NoError(t, checkRankFiles(res.Path, 4, 3))
		})
	}
}

// TestAsyncCrashKeepsPreviousCheckpoint: rank 0 is SIGKILLed right after
// a Report whose checkpoint is still uploading; the gang restarts from the
// checkpoint committed before it, which no half-written one replaces.
func TestAsyncCrashKeepsPreviousCheckpoint(t *testing.T) {
	run, url := asyncRun(t, "crash", 1)
	fn := func(ctx context.Context, s *trainer.Session) error {
		if ck := s.GetCheckpoint(); ck != nil {
			return checkRankFiles(ck.Path(), s.WorldSize(), 1)
		}
		if err := reportRankFiles(ctx, s, 1); err != nil {
			return err
		}
		// Reports until rank 0 says checkpoint 1 is committed.
		for i := 0; s.GetCheckpoint() == nil; i++ {
			if i == 10000 {
				return errors.New("checkpoint 1 was never committed")
			}
			if err := s.Report(ctx, nil, nil); err != nil {
				return err
			}
		}
		if err := reportRankFiles(ctx, s, 2); err != nil {
			return err
		}
		return breakGang(ctx, s, 0)
	}
	res, out, err := fit(t, fn, 2, run, nil)
	must.NoError(t, err, must.Sprint(out))
	must.SliceLen(t, 1, res.Recovered, must.Sprint(out))
	latest := latestOnS3(t, url, "crash")
	must.NoError(t, checkRankFiles(latest.Path, 2, 1))
}

// breakGang SIGKILLs rank's process; the gang breaks at the barrier.
func breakGang(ctx context.Context, s *trainer.Session, rank int) error {
	if s.WorldRank() == rank {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	return s.Barrier(ctx)
}

// TestAsyncPeerLostKeepsReportedCheckpoint: rank 0 alone writes the
// checkpoints (as a DDP model is saved), and rank 1 is SIGKILLed as soon
// as the second Report returns, before a later report could tell how the
// uploads went. Rank 0's process lives on into the next generation: its
// upload and commit of that checkpoint finish first, and the gang resumes
// from it, not from the one before it.
func TestAsyncPeerLostKeepsReportedCheckpoint(t *testing.T) {
	run, url := asyncRun(t, "peerlost", 1)
	fn := func(ctx context.Context, s *trainer.Session) error {
		if s.Generation() > 1 {
			ck := s.GetCheckpoint()
			if ck == nil {
				return errors.New("the next generation resumed from no checkpoint")
			}
			if b, err := os.ReadFile(filepath.Join(ck.Path(), "model.bin")); err != nil || string(b) != "step 2" {
				return fmt.Errorf("resumed from %q (%v), want step 2's checkpoint", b, err)
			}
			return nil
		}
		for step := int64(1); step <= 2; step++ {
			var ck *trainer.Checkpoint
			if s.WorldRank() == 0 {
				dir, err := s.NewCheckpointDir()
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "model.bin"), fmt.Appendf(nil, "step %d", step), 0o644); err != nil {
					return err
				}
				ck = trainer.CheckpointFromDirectory(dir)
			}
			if err := s.Report(ctx, trainer.Metrics{"at": step}, ck); err != nil {
				return err
			}
		}
		return breakGang(ctx, s, 1)
	}
	res, out, err := fit(t, fn, 2, run, nil)
	must.NoError(t, err, must.Sprint(out))
	must.SliceLen(t, 1, res.Recovered, must.Sprint(out))
	must.EqOp(t, int64(2), latestOnS3(t, url, "peerlost").Record.Step)
}

// TestAsyncStopFinishesPendingUpload: every worker is asked to stop (the
// launcher's SIGTERM); the gang reports its last checkpoint, whose upload
// is still going when the training function returns, and the workers
// commit it before they exit as stopped.
func TestAsyncStopFinishesPendingUpload(t *testing.T) {
	run, url := asyncRun(t, "stop", -1)
	flags := sharedDir(t, "S3_STOP_FLAGS")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !workerenv.IsWorker() {
		go func() {
			for i := 0; i < 12000; i++ { // at most two minutes
				if _, err := os.Stat(filepath.Join(flags, "training")); err == nil {
					cancel() // SIGTERM to every worker
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	fn := func(ctx context.Context, s *trainer.Session) error {
		for step := int64(1); ; step++ {
			stop, err := s.ShouldCheckpoint(ctx)
			if err != nil {
				return err
			}
			if stop {
				return reportRankFiles(ctx, s, step)
			}
			if s.WorldRank() == 0 && step == 3 {
				if err := os.WriteFile(filepath.Join(flags, "training"), nil, 0o644); err != nil {
					return err
				}
			}
			if err := s.Report(ctx, nil, nil); err != nil {
				return err
			}
		}
	}
	tr := trainer.New(fn, trainer.Scaling{NumWorkers: 2}, run, nil)
	tr.Args = []string{"-test.run=^" + t.Name() + "$"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	_, err := tr.Fit(ctx)
	must.ErrorIs(t, err, trainer.ErrStopped, must.Sprint(out.String()))
	latest := latestOnS3(t, url, "stop")
	must.True(t, latest.OK, must.Sprint("the last checkpoint, uploading at the stop, was committed"))
	at, ok := latest.Record.Metrics["at"].(float64)
	must.True(t, ok, must.Sprintf("%+v", latest.Record))
	must.NoError(t, checkRankFiles(latest.Path, 2, int64(at)))
}
