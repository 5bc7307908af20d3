package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// resumeConfig tells the one training function of the resume_from tests
// which run it is in: the workers take the run from their environment, and
// the function from the test.
type resumeConfig struct {
	Phase string `json:"phase"`
}

// weights is what rank 0 writes in a checkpoint of the resume_from tests.
const weightsFile = "w.bin"

// reportWeights reports a checkpoint of rank 0's weights file (the other
// ranks report none, as a DDP model is saved).
func reportWeights(ctx context.Context, s *trainer.Session, content string, metrics trainer.Metrics) error {
	var ck *trainer.Checkpoint
	if s.WorldRank() == 0 {
		dir, err := s.NewCheckpointDir()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, weightsFile), []byte(content), 0o644); err != nil {
			return err
		}
		ck = trainer.CheckpointFromDirectory(dir)
	}
	return s.Report(ctx, metrics, ck)
}

// readWeights reads the weights file of the checkpoint GetCheckpoint gives.
func readWeights(s *trainer.Session) (string, error) {
	ck := s.GetCheckpoint()
	if ck == nil {
		return "", fmt.Errorf("rank %d has no checkpoint to start from", s.WorldRank())
	}
	b, err := os.ReadFile(filepath.Join(ck.Path(), weightsFile))
	return string(b), err
}

// resumeFn is the source run (three checkpoints), a run that starts from
// one of them ("tuned": its rank 1 crashes once before its first report,
// so that the gang starts from it twice), and the tuned run again, which
// resumes from its own checkpoint.
func resumeFn(crashMarks string) trainer.TrainFunc {
	return func(ctx context.Context, s *trainer.Session) error {
		var cfg resumeConfig
		if err := s.DecodeConfig(&cfg); err != nil {
			return err
		}
		switch cfg.Phase {
		case "source":
			for step := 1; step <= 3; step++ {
				if err := reportWeights(ctx, s, fmt.Sprintf("source step %d", step), trainer.Metrics{"step": step}); err != nil {
					return err
				}
			}
			return nil
		case "tuned":
			got, err := readWeights(s)
			if err != nil {
				return err
			}
			mark := filepath.Join(crashMarks, "crashed")
			if s.WorldRank() == 1 {
				if _, err := os.Stat(mark); errors.Is(err, os.ErrNotExist) {
					if err := os.WriteFile(mark, nil, 0o644); err != nil {
						return err
					}
					os.Exit(3) // a lost worker, before the run has a checkpoint of its own
				}
			}
			return reportWeights(ctx, s, "tuned from "+got, trainer.Metrics{"from": got})
		case "again":
			got, err := readWeights(s)
			if err != nil {
				return err
			}
			return s.Report(ctx, trainer.Metrics{"from": got}, nil)
		}
		return fmt.Errorf("unknown phase %q", cfg.Phase)
	}
}

// A run starts from another run's checkpoint (Ray's resume_from_checkpoint)
// while it has none of its own: every rank gets a checked copy, also after
// a lost worker restarts the gang; the run counts its steps from 0, its
// first checkpoint replaces the copy, and a restart then resumes from its
// own. The other run's checkpoint is left as it was.
func TestResumeFromAnotherRunsCheckpoint(t *testing.T) {
	root := sharedDir(t, "RESUME_FROM_ROOT")
	t.Setenv("NOMAD_TRAIN_LOG_LEVEL", "info") // fetches are logged
	fn := resumeFn(sharedDir(t, "RESUME_FROM_MARKS"))
	source := trainer.Run{Name: "source", StoragePath: root}
	_, out, err := fit(t, fn, 2, source, resumeConfig{"source"})
	must.NoError(t, err, must.Sprint(out))
	second := checkpointAt(t, root, "source", 2)
	from := filepath.Join(root, "source", second)

	tuned := trainer.Run{Name: "tuned", StoragePath: root, Failure: trainer.FailureConfig{MaxFailures: 1},
		Checkpoint: trainer.CheckpointConfig{ResumeFrom: from}}
	res, out, err := fit(t, fn, 2, tuned, resumeConfig{"tuned"})
	must.NoError(t, err, must.Sprint(out))
	must.EqOp(t, "source step 2", res.Metrics["from"], must.Sprint(out))
	must.EqOp(t, 2, strings.Count(out, "fetched the checkpoint to start from"), must.Sprint("the gang started from it twice\n", out))
	recs := records(t, root, "tuned")
	must.Len(t, 1, recs)
	must.EqOp(t, int64(1), recs[0].Step, must.Sprint("the run counts its own steps"))
	scratch, err := filepath.Glob(filepath.Join(root, "tuned", ".scratch", "start-*"))
	must.NoError(t, err)
	must.SliceEmpty(t, scratch, must.Sprint("the copy goes once the run has a checkpoint of its own"))

	res, out, err = fit(t, fn, 2, tuned, resumeConfig{"again"})
	must.NoError(t, err, must.Sprint(out))
	must.EqOp(t, "tuned from source step 2", res.Metrics["from"], must.Sprint(out))
	must.StrNotContains(t, out, "fetched the checkpoint to start from")

	check := filepath.Join(t.TempDir(), "check")
	must.NoError(t, storage.DownloadCheckpoint(context.Background(), from, check))
	b, err := os.ReadFile(filepath.Join(check, weightsFile))
	must.NoError(t, err)
	must.EqOp(t, "source step 2", string(b))
}

// A checkpoint to start from that is not there fails the run at start,
// without a restart (none would find it), with an error that names it, and
// leaves the run without a checkpoint.
func TestResumeFromMissingCheckpoint(t *testing.T) {
	root := sharedDir(t, "RESUME_FROM_ROOT")
	missing := filepath.Join(root, "nowhere", "checkpoint_000004")
	run := trainer.Run{Name: "lost", StoragePath: root, Checkpoint: trainer.CheckpointConfig{ResumeFrom: missing},
		Failure: trainer.FailureConfig{MaxFailures: 3}}
	_, out, err := fit(t, resumeFn(sharedDir(t, "RESUME_FROM_MARKS")), 2, run, resumeConfig{"again"})
	must.Error(t, err)
	must.StrContains(t, out, "cannot start from the checkpoint resume_from names: "+missing+": no checkpoint", must.Sprint(out))
	must.StrNotContains(t, out, "starting a replacement", must.Sprint(out))
	must.SliceEmpty(t, records(t, root, "lost"))
}

// checkpointAt is the name of run's checkpoint at step.
func checkpointAt(t *testing.T, root, run string, step int64) string {
	t.Helper()
	for _, r := range records(t, root, run) {
		if r.Step == step && r.Checkpoint != "" {
			return r.Checkpoint
		}
	}
	t.Fatalf("run %s has no checkpoint at step %d", run, step)
	return ""
}

// records reads a run's progress records from its directory.
func records(t *testing.T, root, run string) []storage.Record {
	t.Helper()
	st, err := storage.OpenReadOnly(root, run, storage.Policy{})
	must.NoError(t, err)
	defer st.Close()
	recs, err := st.Records()
	must.NoError(t, err)
	return recs
}

// On S3 a run starts from another run's checkpoint by the location a
// Result names: each node fetches it once for its ranks, every rank finds
// every rank's files in it, and each node's copy goes once the run has
// committed a checkpoint of its own.
func TestResumeFromOnS3(t *testing.T) {
	url := s3Storage(t)
	twoNodes(t)
	t.Setenv("NOMAD_TRAIN_LOG_LEVEL", "info") // fetches are logged
	const world = 4
	fn := func(ctx context.Context, s *trainer.Session) error {
		var cfg resumeConfig
		if err := s.DecodeConfig(&cfg); err != nil {
			return err
		}
		if cfg.Phase == "source" {
			for step := int64(1); step <= 2; step++ {
				if err := reportRankFiles(ctx, s, step); err != nil {
					return err
				}
			}
			return nil
		}
		ck := s.GetCheckpoint()
		if ck == nil {
			return fmt.Errorf("rank %d has no checkpoint to start from", s.WorldRank())
		}
		if err := checkRankFiles(ck.Path(), world, 1); err != nil {
			return err
		}
		return reportRankFiles(ctx, s, 7)
	}
	_, out, err := fit(t, fn, world, trainer.Run{Name: "source", StoragePath: url}, resumeConfig{"source"})
	must.NoError(t, err, must.Sprint(out))
	st, err := storage.OpenStoreReadOnly(context.Background(), url, "source", storage.Policy{}, storage.WithLocalDir(t.TempDir()))
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.NoError(t, st.Close())
	must.SliceNotEmpty(t, recs)
	from := storage.CheckpointLocation(url, "source", recs[0].Checkpoint)

	tuned := trainer.Run{Name: "tuned", StoragePath: url, Checkpoint: trainer.CheckpointConfig{ResumeFrom: from}}
	_, out, err = fit(t, fn, world, tuned, resumeConfig{"tuned"})
	must.NoError(t, err, must.Sprint(out))
	must.EqOp(t, 2, strings.Count(out, "fetched the checkpoint to start from for this node"), must.Sprint("once per node\n", out))
	res := latestOnS3(t, url, "tuned")
	must.True(t, res.OK)
	must.EqOp(t, int64(1), res.Record.Step)
	must.NoError(t, checkRankFiles(res.Path, world, 7))
	start, ok := launch.ReadStart(context.Background(), url, "tuned")
	must.True(t, ok, must.Sprint("rank 0 noted where the run started"))
	must.Eq(t, launch.Start{From: from, Step: 1}, start)
	for _, node := range []string{"S3_NODE_A", "S3_NODE_B"} {
		left, err := filepath.Glob(filepath.Join(sharedDir(t, node), "*", "tuned-*", ".scratch", "start-*"))
		must.NoError(t, err)
		must.SliceEmpty(t, left, must.Sprint(node))
	}
}
