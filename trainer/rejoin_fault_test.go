package trainer_test

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// TestFrozenWorkerReplacedSoon: a SIGSTOPped worker loses its lease, its
// peers re-form the gang without it, and the launcher replaces it once it
// has stayed out of the re-forming gang for the default rejoin timeout.
// Training used to resume only after a fixed minute; it now resumes after
// the default 20 s plus the time to notice the freeze and start the
// replacement. The events happen in order: freeze, kill of the frozen
// process, replacement, first new progress record.
//
// FT_REJOIN_TIMEOUT sets the timeout instead of the default, and
// FT_LEASE_TTL the lease (default 2s here), to measure.
func TestFrozenWorkerReplacedSoon(t *testing.T) {
	pidDir := sharedDir(t, "FT_PID_DIR")
	lease := "2s" // notice the freeze quickly
	if v := os.Getenv("FT_LEASE_TTL"); v != "" {
		lease = v
	}
	t.Setenv("NOMAD_TRAIN_LEASE_TTL", lease)
	storageDir := t.TempDir()
	progress := filepath.Join(storageDir, "frozen", storage.ProgressFile)
	type times struct{ stopped, replaced, resumed time.Time }
	measured := make(chan times, 1)
	go func() {
		if workerenv.IsWorker() {
			return
		}
		for countRecords(progress) < 3 {
			time.Sleep(5 * time.Millisecond)
		}
		before := alive(pidDir)
		victim := before[len(before)-1]
		syscall.Kill(victim, syscall.SIGSTOP)
		var m times
		m.stopped = time.Now()
		for m.replaced.IsZero() { // a new worker process writes its pid
			if pids := alive(pidDir); slices.ContainsFunc(pids, func(p int) bool { return !slices.Contains(before, p) }) {
				m.replaced = time.Now()
			}
			time.Sleep(5 * time.Millisecond)
		}
		records := countRecords(progress)
		for countRecords(progress) == records {
			time.Sleep(5 * time.Millisecond)
		}
		m.resumed = time.Now()
		measured <- m
	}()
	var rejoin time.Duration // the default
	if v := os.Getenv("FT_REJOIN_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		must.NoError(t, err)
		rejoin = d
	}
	res, out, err := fit(t, ftTrain, 3, trainer.Run{Name: "frozen", StoragePath: storageDir,
		Failure: trainer.FailureConfig{MaxFailures: 1, RejoinTimeout: rejoin}}, nil)
	must.NoError(t, err, must.Sprint(out))
	m := <-measured
	resume := m.resumed.Sub(m.stopped)
	t.Logf("SIGSTOP to replacement %v, to the next progress record %v (rejoin timeout %v)",
		m.replaced.Sub(m.stopped).Round(100*time.Millisecond), resume.Round(100*time.Millisecond), rejoin)
	must.SliceLen(t, 1, res.Recovered, must.Sprint(out))
	must.Eq(t, "killed by SIGKILL", res.Recovered[0].Message)
	want := rejoin
	if want == 0 {
		want = workerenv.DefaultRejoinTimeout
	}
	must.StrContains(t, out, "did not rejoin generation 2 within "+want.String()+": presumed hung, killing it")
	// The old fixed timeout was a minute from the moment the gang began
	// to re-form: no replacement, and so no progress, before it.
	must.Less(t, time.Minute, resume, must.Sprint(out))
	recs, err := storage.OpenReadOnly(storageDir, "frozen", storage.Policy{})
	must.NoError(t, err)
	all, err := recs.Records()
	must.NoError(t, err)
	must.SliceLen(t, ftEpochs, all)
	must.SliceEmpty(t, alive(pidDir))
}
