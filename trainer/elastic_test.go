package trainer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/data"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

const (
	elMinEpochs = 6   // epochs an elastic run trains at least
	elMaxEpochs = 400 // the test fails if the gang has not grown back by then
	elSamples   = 24
)

// elTrain trains an elastic gang of 2..3 with a checkpoint every epoch.
// Each epoch every rank sums the samples its sampler gives it, so the
// gang checks that the samplers re-shard at each world size: every sample
// once per epoch. The member local-2 kills itself (SIGKILL) once, in a
// gang of three; the run ends only after the gang has been at two and has
// grown back to three.
func elTrain(ctx context.Context, s *trainer.Session) error {
	dir := os.Getenv("EL_DIR")
	// shrunk: the gang has trained at two. Every rank learns it from the
	// checkpoint or the world size, so all agree on when to end.
	start, shrunk := 0, false
	if ck := s.GetCheckpoint(); ck != nil {
		b, err := os.ReadFile(filepath.Join(ck.Path(), "state"))
		if err != nil {
			return err
		}
		if _, err := fmt.Sscan(string(b), &start, &shrunk); err != nil {
			return err
		}
		start++
	}
	shrunk = shrunk || s.WorldSize() == 2
	sampler := data.DistributedSampler{Len: elSamples, Rank: s.WorldRank(), WorldSize: s.WorldSize(), Shuffle: true, Seed: 3}
	for epoch := start; epoch < elMaxEpochs; epoch++ {
		sum := []float64{0, 0}
		for _, i := range sampler.Indices(epoch) {
			sum[0] += float64(i)
			sum[1]++
		}
		if err := s.AllReduceFloat64(ctx, sum, trainer.Sum); err != nil {
			return err
		}
		if sum[1] != elSamples || sum[0] != elSamples*(elSamples-1)/2 {
			return fmt.Errorf("epoch %d at world size %d: samplers covered %v samples summing to %v", epoch, s.WorldSize(), sum[1], sum[0])
		}
		kill := filepath.Join(dir, "killed")
		if _, err := os.Stat(kill); err != nil && s.WorldSize() == 3 && epoch >= 2 && os.Getenv(workerenv.MemberID) == "local-2" {
			os.WriteFile(kill, fmt.Append(nil, epoch), 0o644)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		var ck *trainer.Checkpoint
		if s.WorldRank() == 0 {
			d, err := s.NewCheckpointDir()
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(d, "state"), fmt.Appendf(nil, "%d %v", epoch, shrunk), 0o644); err != nil {
				return err
			}
			ck = trainer.CheckpointFromDirectory(d)
		}
		m := trainer.Metrics{"epoch": epoch, "world_size": s.WorldSize(), "generation": s.Generation()}
		if err := s.Report(ctx, m, ck); err != nil {
			return err
		}
		if epoch+1 >= elMinEpochs && shrunk && s.WorldSize() == 3 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the gang did not grow back to 3 in %d epochs", elMaxEpochs)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// The must-show of elastic training: a local run of 2..3 workers loses one
// (killed) and goes on at two from its latest checkpoint without waiting:
// the replacement is held back until the gang of two has reported, so a
// gang that waited for it would never report again. Then the replacement
// joins at the next checkpoint and the gang grows back to three. The
// metrics history has no gap in steps or epochs, and the growth costs no
// failure (max_failures 1 covers the one kill).
func TestElasticShrinksToMinAndGrowsBack(t *testing.T) {
	dir := sharedDir(t, "EL_DIR")
	storagePath := sharedDir(t, "EL_STORAGE")
	if workerenv.IsWorker() && os.Getenv(workerenv.MemberID) == "local-2" && fileExists(filepath.Join(dir, "killed")) {
		waitForSmallGang(t, storagePath, filepath.Join(dir, "killed"))
	}
	tr := trainer.New(elTrain, trainer.Scaling{Min: 2, Max: 3, Settle: 300 * time.Millisecond},
		trainer.Run{Name: "elastic", StoragePath: storagePath, Failure: trainer.FailureConfig{MaxFailures: 1}}, nil)
	tr.Args = []string{"-test.run=^" + t.Name() + "$"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := tr.Fit(ctx)
	must.NoError(t, err, must.Sprint(out.String()))
	must.Len(t, 1, res.Recovered, must.Sprint(out.String()))

	recs, err := storage.ReadProgressFile(res.MetricsPath)
	must.NoError(t, err)
	var sizes []int
	for i, r := range recs {
		must.Eq(t, int64(i+1), r.Step, must.Sprint("a gap in steps"))
		must.Eq[any](t, float64(i), r.Metrics["epoch"], must.Sprint("a gap in epochs"))
		w := int(r.Metrics["world_size"].(float64))
		if len(sizes) == 0 || sizes[len(sizes)-1] != w {
			sizes = append(sizes, w)
		}
	}
	// Three until the kill (or two first, where the third came late),
	// then two, then three again.
	must.SliceContainsSubset(t, sizes, []int{2, 3})
	shrank := false
	for i := 1; i < len(sizes); i++ {
		if sizes[i-1] == 3 && sizes[i] == 2 {
			shrank = true
		}
	}
	must.True(t, shrank, must.Sprintf("world sizes %v: never went from 3 to 2", sizes))
	must.Eq(t, 3, sizes[len(sizes)-1], must.Sprintf("world sizes %v", sizes))
	t.Logf("world sizes %v over %d steps", sizes, len(recs))
}

// waitForSmallGang holds a replacement back until the gang of two that
// the kill left has reported a step: the epoch the killed worker died in.
func waitForSmallGang(t *testing.T, storagePath, killed string) {
	b, _ := os.ReadFile(killed)
	var died float64
	fmt.Sscan(string(b), &died)
	path := filepath.Join(storagePath, "elastic", storage.ProgressFile)
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		recs, _ := storage.ReadProgressFile(path)
		for _, r := range recs {
			w, _ := r.Metrics["world_size"].(float64)
			if e, _ := r.Metrics["epoch"].(float64); w == 2 && e >= died {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Log("the gang of two never reported")
}
