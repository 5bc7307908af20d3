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

// cloneInto copies the donor's latest checkpoint into the trial's storage
// as a committed checkpoint (PBT exploit); the trial, stopped, restarts
// from it. The commit record carries the donor's step and metrics, so the
// trial's iteration count continues from the donor's. In a directory the
// tuner copies the files; on an object store the server copies them
// (storage.Cloner), so that a big model does not pass through the
// tuner's machine, and whoever restores the copy checks it against the
// donor's manifest.
func (e *experiment) cloneInto(ts *TrialState, d *Decision) error {
	donor, err := e.trials.open(e.ctx, d.Donor, storage.Policy{})
	if err != nil {
		return fmt.Errorf("open donor storage: %w", err)
	}
	defer donor.Close()
	st, err := storage.OpenStore(e.ctx, e.trials.root, ts.ID, storage.Policy{NumToKeep: e.cfg.Checkpoint.NumToKeep,
		ScoreAttribute: e.cfg.Checkpoint.ScoreAttribute, ScoreOrder: e.cfg.Checkpoint.ScoreOrder},
		append(tunerStorage(e.trials), storage.WithLogger(e.log))...)
	if err != nil {
		return fmt.Errorf("open trial storage: %w", err)
	}
	defer st.Close()
	cloner, byServer := st.(storage.Cloner)
	var src storage.Record
	var staged *storage.Staged
	if byServer {
		live, err := donor.Best(0)
		if err != nil {
			return fmt.Errorf("find donor checkpoint: %w", err)
		}
		var ok bool
		if src, ok = storage.Newest(live); !ok {
			return fmt.Errorf("find donor checkpoint: %s has none", d.Donor)
		}
	} else {
		res, err := donor.LatestIntact()
		if err != nil || !res.OK {
			return fmt.Errorf("find donor checkpoint: %w (found %v)", err, res.OK)
		}
		src = res.Record
		if staged, err = st.Stage(); err != nil {
			return err
		}
		if err := copyTree(res.Path, staged.Dir()); err != nil {
			staged.Abort()
			return fmt.Errorf("copy donor checkpoint: %w", err)
		}
	}
	metrics := trainer.Metrics{}
	for k, v := range src.Metrics {
		metrics[k] = v
	}
	metrics[ClonedFrom] = d.Donor
	// The trial restarts from the clone and rolls back what it reported
	// after the clone's step. The roll-back comes once the copy is ready,
	// so that an exploit that fails leaves the trial its own work, and
	// before the commit, so that the clone's record does not go back in
	// steps (readers refuse a history that does). The Cloner does both.
	rec := storage.Record{Step: src.Step, Metrics: metrics, TimeTotal: src.TimeTotal} // the donor's, as Ray restores it
	if byServer {
		_, err = cloner.CloneCheckpoint(d.Donor, src.Checkpoint, rec)
	} else if err = st.TruncateAfter(src.Step); err != nil {
		staged.Abort()
		err = fmt.Errorf("roll trial back to the cloned step: %w", err)
	} else {
		_, err = st.Commit(staged, rec)
	}
	if err != nil {
		return fmt.Errorf("commit cloned checkpoint: %w", err)
	}
	ts.Exploits = append(ts.Exploits, ExploitRecord{Donor: d.Donor, Time: e.result(d.Donor, src).Time})
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
