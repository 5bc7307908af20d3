package tune

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// PBT cloning: copying a donor trial's latest checkpoint into a recipient.

// cloneInto copies the donor's latest intact checkpoint into the trial's
// storage as a committed checkpoint (PBT exploit); the trial, stopped,
// restarts from it. The commit record carries the donor's step and
// metrics, so the trial's iteration count continues from the donor's. On
// an object store the checkpoint comes down to the tuner's machine
// (checked against its manifest) and goes up again into the trial's run,
// as the trial's own writer would commit it.
func (e *experiment) cloneInto(ts *TrialState, d *Decision) error {
	donor, err := e.trials.open(e.ctx, d.Donor, storage.Policy{})
	if err != nil {
		return fmt.Errorf("open donor storage: %w", err)
	}
	defer donor.Close()
	src, err := donor.LatestIntact()
	if err != nil || !src.OK {
		return fmt.Errorf("find donor checkpoint: %w (found %v)", err, src.OK)
	}
	st, err := storage.OpenStore(e.ctx, e.trials.root, ts.ID, storage.Policy{NumToKeep: e.cfg.Checkpoint.NumToKeep,
		ScoreAttribute: e.cfg.Checkpoint.ScoreAttribute, ScoreOrder: e.cfg.Checkpoint.ScoreOrder},
		append(tunerStorage(e.trials), storage.WithLogger(e.log))...)
	if err != nil {
		return fmt.Errorf("open trial storage: %w", err)
	}
	defer st.Close()
	staged, err := st.Stage()
	if err != nil {
		return err
	}
	if err := copyTree(src.Path, staged.Dir()); err != nil {
		staged.Abort()
		return fmt.Errorf("copy donor checkpoint: %w", err)
	}
	metrics := trainer.Metrics{}
	for k, v := range src.Record.Metrics {
		metrics[k] = v
	}
	metrics[ClonedFrom] = d.Donor
	// The trial restarts from the clone and rolls back what it reported
	// after the clone's step; roll back now, so the clone's record does
	// not go back in steps (readers refuse a history that does).
	if err := st.TruncateAfter(src.Record.Step); err != nil {
		staged.Abort()
		return fmt.Errorf("roll trial back to the cloned step: %w", err)
	}
	if _, err := st.Commit(staged, storage.Record{Step: src.Record.Step, Metrics: metrics}); err != nil {
		return fmt.Errorf("commit cloned checkpoint: %w", err)
	}
	ts.Exploits = append(ts.Exploits, ExploitRecord{Donor: d.Donor, Time: e.result(d.Donor, src.Record).Time})
	return nil
}

// copyTree copies the regular files and directories under src into dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if de.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !de.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}
