package trainer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Each record says how long the run had trained (TimeTotal, Ray's
// time_total_s): the time since the training started, plus, after a
// restart, what the checkpoint it resumed from had trained; the time the
// run was down is not counted.
func TestRecordsCarryTheTimeTrained(t *testing.T) {
	type cfg struct {
		Steps int `json:"steps"`
	}
	const step = 30 * time.Millisecond
	fn := func(ctx context.Context, s *trainer.Session) error {
		var c cfg
		if err := s.DecodeConfig(&c); err != nil {
			return err
		}
		start := 0
		if ck := s.GetCheckpoint(); ck != nil {
			start = 3
		}
		for i := start; i < c.Steps; i++ {
			time.Sleep(step)
			var ck *trainer.Checkpoint
			if s.WorldRank() == 0 {
				dir, err := s.NewCheckpointDir()
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "step"), []byte{byte(i)}, 0o644); err != nil {
					return err
				}
				ck = trainer.CheckpointFromDirectory(dir)
			}
			if err := s.Report(ctx, trainer.Metrics{"i": i}, ck); err != nil {
				return err
			}
		}
		return nil
	}
	dir := t.TempDir()
	run := trainer.Run{Name: "timed", StoragePath: dir}
	_, out, err := fit(t, fn, 2, run, cfg{Steps: 3})
	must.NoError(t, err, must.Sprint(out))
	time.Sleep(300 * time.Millisecond) // down time, not training
	_, out, err = fit(t, fn, 2, run, cfg{Steps: 5})
	must.NoError(t, err, must.Sprint(out))

	st, err := storage.OpenReadOnly(dir, "timed", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.SliceLen(t, 5, recs)
	for i, r := range recs {
		must.Positive(t, r.TimeTotal, must.Sprintf("record %d", i))
		if i == 0 {
			must.GreaterEq(t, step, r.TimeTotal)
			continue
		}
		prev := recs[i-1]
		grew := r.TimeTotal - prev.TimeTotal
		must.GreaterEq(t, step, grew, must.Sprintf("record %d: %v after %v", i, r.TimeTotal, prev.TimeTotal))
		if i == 3 { // the first of the second start
			must.Less(t, r.Time.Sub(prev.Time)-300*time.Millisecond, grew,
				must.Sprintf("the time between the starts counted: %v after %v, %v apart", r.TimeTotal, prev.TimeTotal, r.Time.Sub(prev.Time)))
		}
	}
}
