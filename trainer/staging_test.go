package trainer_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// TestMemoryStaging: with staging = "memory", four workers on two
// simulated nodes build their checkpoints in RAM (/dev/shm) and upload
// them from there, and sweep what runs left there a day ago; once the run
// ends nothing of its checkpoints is left in memory (but the empty file
// that marked the directory in use),
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
	// What a run killed a day ago left in memory: swept as the run starts.
	left := fmt.Sprintf("/dev/shm/nomad-train-%d/killed-%012x", os.Getuid(), time.Now().UnixNano()&(1<<48-1)) // a node cache's name: 12 hex digits
	if !workerenv.IsWorker() {
		// The user's directory as a worker makes it (private), not as
		// MkdirAll would (open to all, which a worker refuses), on a
		// machine where no run has made it yet.
		if err := os.Mkdir(filepath.Dir(left), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			t.Fatal(err)
		}
		must.NoError(t, os.MkdirAll(filepath.Join(left, "rank0-1"), 0o755))
		must.NoError(t, os.WriteFile(filepath.Join(left, "rank0-1", "model.bin"), []byte("w"), 0o644))
		day := time.Now().Add(-storage.NodeCacheIdle - time.Minute)
		must.NoError(t, os.Chtimes(left, day, day))
		t.Cleanup(func() { os.RemoveAll(left) })
	}
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
			if free := markFree(filepath.Join(filepath.Dir(dir), storage.InUseFile)); free != syscall.EWOULDBLOCK {
				return fmt.Errorf("the memory scratch is not marked in use while the run trains (%v)", free)
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

	_, err = os.Stat(left)
	must.ErrorIs(t, err, fs.ErrNotExist, must.Sprint("what a killed run left in memory a day ago"))

	staged, err := filepath.Glob(fmt.Sprintf("/dev/shm/nomad-train-%d/memstage-*", os.Getuid()))
	must.NoError(t, err)
	must.SliceNotEmpty(t, staged, must.Sprint("the run's memory scratch"))
	for _, dir := range staged {
		t.Cleanup(func() { os.RemoveAll(dir) })
		must.NoError(t, markFree(filepath.Join(dir, storage.InUseFile)), must.Sprint("released once the run ended"))
		must.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() != storage.InUseFile {
				return fmt.Errorf("%s is still in memory after the run", p)
			}
			return err
		}))
	}
	_, out, err = fit(t, fn, world, run, nil)
	must.NoError(t, err, must.Sprint(out))
}

// markFree returns nil if no process holds the in-use mark at path, as a
// sweep would find it, and otherwise why not.
func markFree(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
