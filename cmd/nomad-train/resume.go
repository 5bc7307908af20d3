package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// lastRunFile, in a run's local directory beside lastConfigFile, records
// how the run's last local launch went: its worker count, and whether it
// finished. A run without one (older runs) resumes as before.
const lastRunFile = "last-run.json"

type lastRun struct {
	NumWorkers int  `json:"num_workers"`
	Complete   bool `json:"complete"`
}

// readLastRun reads the spec's run's record; ok is false when there is
// none.
func readLastRun(ctx context.Context, spec *trainspec.Spec) (rec lastRun, ok bool) {
	b := readNote(ctx, spec, lastRunFile)
	if b == nil || json.Unmarshal(b, &rec) != nil {
		return lastRun{}, false
	}
	return rec, true
}

// writeLastRun records rec for the spec's run; best effort, as it only
// feeds notes.
func writeLastRun(ctx context.Context, spec *trainspec.Spec, rec lastRun) {
	b, _ := json.Marshal(rec)
	writeNote(ctx, spec, lastRunFile, b)
}

// workersChange says how the worker count differs from the last launch's,
// or "": a run resumes from its latest checkpoint at the new size.
func workersChange(rec lastRun, had bool, n int) string {
	if !had || rec.NumWorkers == 0 || rec.NumWorkers == n {
		return ""
	}
	return fmt.Sprintf("num_workers changed since the last run (%d → %d); training resumes from the latest checkpoint with %s (run with -fresh to start afresh)",
		rec.NumWorkers, n, workers(n))
}

// runDir is the spec's run directory when its storage is local, else "".
func runDir(spec *trainspec.Spec) string {
	dir, err := storage.LocalDir(spec.Run.StoragePath)
	if err != nil {
		return ""
	}
	return filepath.Join(dir, spec.Name)
}

// startFresh moves the spec's run directory aside to <dir>.old-<time> so
// that the run starts over; it never deletes a user's checkpoints. It
// says where the old run went, or nothing when there was none.
func startFresh(spec *trainspec.Spec, now time.Time, stdout io.Writer) error {
	dir := runDir(spec)
	if dir == "" {
		return fmt.Errorf("-fresh needs a local storage path, not %q: remove the run's objects yourself", spec.Run.StoragePath)
	}
	aside, err := moveAside(dir, now)
	if err != nil || aside == "" {
		return err
	}
	if abs, err := filepath.Abs(aside); err == nil {
		aside = abs
	}
	fmt.Fprintf(stdout, "==> starting afresh: the previous run moved to %s\n", aside)
	return nil
}

// moveAside renames dir to dir.old-<UTC time>, with a counter if that is
// taken; "" when dir does not exist.
func moveAside(dir string, now time.Time) (string, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("start afresh: %w", err)
	}
	base := dir + ".old-" + now.UTC().Format("20060102T150405Z")
	aside := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
			break
		}
		aside = fmt.Sprintf("%s-%d", base, i)
	}
	if err := os.Rename(dir, aside); err != nil {
		return "", fmt.Errorf("start afresh: move the previous run aside: %w", err)
	}
	return aside, nil
}
