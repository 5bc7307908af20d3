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
// simulated nodes build their checkpoints in RAM (/dev/shm), upload them
// from there and keep the node's copy there, and sweep what runs left
// there a day ago; once the run ends nothing of it is left in memory,
// and the resumed run restores into memory and finds every rank's files.
func TestMemoryStaging(t *testing.T) {
	skipWithoutShm(t)
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
		must.NoError(t, os.MkdirAll(filepath.Join(left, "checkpoint_000001"), 0o755))
		must.NoError(t, os.WriteFile(filepath.Join(left, "checkpoint_000001", "model.bin"), []byte("w"), 0o644))
		day := time.Now().Add(-storage.NodeCacheIdle - time.Minute)
		must.NoError(t, os.Chtimes(left, day, day))
		t.Cleanup(func() { os.RemoveAll(left) })
	}
	fn := memoryStagingSteps(world)
	_, out, err := fit(t, fn, world, run, nil)
	must.NoError(t, err, must.Sprint(out))
	res := latestOnS3(t, url, "memstage")
	must.EqOp(t, 3, res.Record.Step)
	must.NoError(t, checkRankFiles(res.Path, world, 3))

	_, err = os.Stat(left)
	must.ErrorIs(t, err, fs.ErrNotExist, must.Sprint("what a killed run left in memory a day ago"))
	mustLeaveNoMemory(t, "memstage")

	_, out, err = fit(t, fn, world, run, nil)
	must.NoError(t, err, must.Sprint(out))
	mustLeaveNoMemory(t, "memstage")
}

// TestMemoryCacheMovesToDisk: on one node, the run's copy of its latest
// checkpoint, kept in memory while it trains, moves to the node's cache
// on disk when its last worker leaves, and back into memory when the run
// starts again there, which restores from it.
func TestMemoryCacheMovesToDisk(t *testing.T) {
	skipWithoutShm(t)
	url := s3Storage(t)
	node := sharedDir(t, "S3_NODE_A")
	trainer.SetNodeCaches(func(int) string { return node })
	run := trainer.Run{Name: "memdisk", StoragePath: url,
		Checkpoint: trainer.CheckpointConfig{AsyncUpload: trainer.Async(true), Staging: "memory"}}
	const world = 2
	fn := memoryStagingSteps(world)
	_, out, err := fit(t, fn, world, run, nil)
	must.NoError(t, err, must.Sprint(out))
	mustLeaveNoMemory(t, "memdisk")
	disk := storage.NodeCacheDir(filepath.Join(node, fmt.Sprintf("nomad-train-%d", os.Getuid())), url, "memdisk")
	copies, err := filepath.Glob(filepath.Join(disk, "checkpoint_*", storage.ManifestFile))
	must.NoError(t, err)
	must.Eq(t, []string{filepath.Join(disk, "checkpoint_000002", storage.ManifestFile)}, copies) // numbered from 0
	must.NoError(t, checkRankFiles(filepath.Dir(copies[0]), world, 3))
	// A mark no download would bring: found by the resumed run if its
	// node's copy is the one it restored.
	must.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(copies[0]), movedMark), nil, 0o644))

	_, out, err = fit(t, fn, world, run, nil)
	must.NoError(t, err, must.Sprint(out))
	must.StrContains(t, out, "restored from the node's copy", must.Sprint("the resumed run restores from the copy it moved back"))
	mustLeaveNoMemory(t, "memdisk")
}

// movedMark is a file TestMemoryCacheMovesToDisk adds to the node's copy.
const movedMark = "moved-from-disk"

// memoryStagingSteps trains three steps, each with a checkpoint every rank
// builds in memory, or, resumed, checks the checkpoint restored (in
// memory too, every rank's file).
func memoryStagingSteps(world int) trainer.TrainFunc {
	return func(ctx context.Context, s *trainer.Session) error {
		if ck := s.GetCheckpoint(); ck != nil {
			if !strings.HasPrefix(ck.Path(), "/dev/shm/") {
				return fmt.Errorf("checkpoint restored at %s, not in memory", ck.Path())
			}
			if _, err := os.Stat(filepath.Join(ck.Path(), movedMark)); err == nil && s.WorldRank() == 0 {
				fmt.Println("restored from the node's copy")
			}
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
			cache := filepath.Dir(filepath.Dir(dir)) // <cache>/.scratch/<dir>
			if free := markFree(filepath.Join(cache, storage.InUseFile)); free != syscall.EWOULDBLOCK {
				return fmt.Errorf("the memory cache is not marked in use while the run trains (%v)", free)
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
}

// mustLeaveNoMemory checks that nothing of run is left in memory once its
// workers are gone.
func mustLeaveNoMemory(t *testing.T, run string) {
	t.Helper()
	left, err := filepath.Glob(fmt.Sprintf("/dev/shm/nomad-train-%d/%s-*", os.Getuid(), run))
	must.NoError(t, err)
	for _, dir := range left {
		os.RemoveAll(dir)
	}
	must.SliceEmpty(t, left, must.Sprint("the run's node caches in memory, after its workers left"))
}

func skipWithoutShm(t *testing.T) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != 0x01021994 {
		t.Skip("no tmpfs at /dev/shm")
	}
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
