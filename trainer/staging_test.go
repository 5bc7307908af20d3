package trainer_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
)

// TestMemoryStaging: with staging = "memory", four workers on two
// simulated nodes build their checkpoints in RAM (/dev/shm) and upload
// them from there; once the run ends nothing of them is left in memory,
// and the resumed run finds every rank's files.
func TestMemoryStaging(t *testing.T) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != 0x01021994 {
		t.Skip("no tmpfs at /dev/shm")
	}
	url := s3Storage(t)
	twoNodes(t)
	run := trainer.Run{Name: "memstage", StoragePath: url,
		Checkpoint: trainer.CheckpointConfig{AsyncUpload: trainer.Async(true), Staging: "memory"}}
	const world = 4
	fn := func(ctx context.Context, s *trainer.Session) error {
		if ck := s.GetCheckpoint(); ck != nil {
			return checkRankFiles(ck.Path(), world, 3)
		}
		for step := int64(1); step <= 3; step++ {
			dir, err := s.NewCheckpointDir()
			if err != nil {
				return err
			}
			if !strings.HasPrefix(dir, "/dev/shm/") {
				return fmt.Errorf("checkpoint built at %s, not in memory", dir)
			}
			name, content := rankFile(s.WorldRank(), step)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				return err
			}
			if err := s.Report(ctx, trainer.Metrics{"at": step}, trainer.CheckpointFromDirectory(dir)); err != nil {
				return err
			}
		}
		return nil
	}
	_, out, err := fit(t, fn, world, run, nil)
	must.NoError(t, err, must.Sprint(out))
	res := latestOnS3(t, url, "memstage")
	must.EqOp(t, 3, res.Record.Step)
	must.NoError(t, checkRankFiles(res.Path, world, 3))

	staged, err := filepath.Glob(fmt.Sprintf("/dev/shm/nomad-train-%d/memstage-*", os.Getuid()))
	must.NoError(t, err)
	must.SliceNotEmpty(t, staged, must.Sprint("the run's memory scratch"))
	for _, dir := range staged {
		t.Cleanup(func() { os.RemoveAll(dir) })
		must.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				return fmt.Errorf("%s is still in memory after the run", p)
			}
			return err
		}))
	}
	_, out, err = fit(t, fn, world, run, nil)
	must.NoError(t, err, must.Sprint(out))
}
