package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// What a run's local directory remembers of its last launch from the
// CLI, so that running it again can say what changed: LastConfigFile holds
// the config (JSON) it last ran with, LastRunFile its worker count and
// whether it finished. A run without them (older runs) resumes as before.
const (
	LastConfigFile = "last-config.json"
	LastRunFile    = "last-run.json"
	// StartFile records the checkpoint a run started from while it had
	// none of its own (checkpoint { resume_from }). Its rank 0 writes it
	// on a cluster as locally, and it stays once the run has checkpoints
	// of its own: status and the run's summary show where it came from.
	StartFile = "last-start.json"
)

// Start is StartFile's record.
type Start struct {
	// From is the checkpoint's location, as the workers were given it.
	From string `json:"from"`
	// Step is its step in the run that made it.
	Step int64 `json:"step"`
}

// String is "<from> (step <step>)".
func (s Start) String() string { return fmt.Sprintf("%s (step %d)", s.From, s.Step) }

// ReadStart reads the checkpoint the run started from; ok is false when
// it started from none, or the note cannot be read.
func ReadStart(ctx context.Context, storagePath, run string, opts ...storage.Option) (s Start, ok bool) {
	b, err := storage.ReadNote(ctx, storagePath, run, StartFile, opts...)
	if err != nil || json.Unmarshal(b, &s) != nil || s.From == "" {
		return Start{}, false
	}
	return s, true
}

// WriteStart records the checkpoint the run started from.
func WriteStart(ctx context.Context, storagePath, run string, s Start, opts ...storage.Option) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return storage.WriteNote(ctx, storagePath, run, StartFile, b, opts...)
}

// LastRun is LastRunFile's record.
type LastRun struct {
	NumWorkers int  `json:"num_workers"`
	Complete   bool `json:"complete"`
}

// ReadLastRun reads the record of the run named run under storagePath
// (a directory or S3, through storage's notes); ok is false when there is
// none or it cannot be read.
func ReadLastRun(ctx context.Context, storagePath, run string, opts ...storage.Option) (rec LastRun, ok bool) {
	b, err := storage.ReadNote(ctx, storagePath, run, LastRunFile, opts...)
	if err != nil || json.Unmarshal(b, &rec) != nil {
		return LastRun{}, false
	}
	return rec, true
}

// WriteLastRun records rec for the run; best effort, as it only feeds
// notes.
func WriteLastRun(ctx context.Context, storagePath, run string, rec LastRun, opts ...storage.Option) {
	b, _ := json.Marshal(rec)
	_ = storage.WriteNote(ctx, storagePath, run, LastRunFile, b, opts...)
}

// ReadLastConfig reads the config the run last ran with, or nil.
func ReadLastConfig(ctx context.Context, storagePath, run string, opts ...storage.Option) []byte {
	b, err := storage.ReadNote(ctx, storagePath, run, LastConfigFile, opts...)
	if err != nil {
		return nil
	}
	return b
}

// WriteLastConfig records the config the run is launched with; best
// effort.
func WriteLastConfig(ctx context.Context, storagePath, run string, config []byte, opts ...storage.Option) {
	_ = storage.WriteNote(ctx, storagePath, run, LastConfigFile, config, opts...)
}

// WorkersChange says how the worker count differs from the last launch's,
// or "": a run resumes from its latest checkpoint at the new size.
func WorkersChange(rec LastRun, had bool, n int) string {
	if !had || rec.NumWorkers == 0 || rec.NumWorkers == n {
		return ""
	}
	return fmt.Sprintf("num_workers changed since the last run (%d → %d); training resumes from the latest checkpoint with %s (run with -fresh to start afresh)",
		rec.NumWorkers, n, Workers(n))
}

// Workers is "1 worker" or "n workers".
func Workers(n int) string {
	return english.Count(n, "worker", "workers")
}

// ConfigChange says how config differs from before, the one the run last
// ran with (ReadLastConfig), or "" when it does not (or there was none): a
// run resumes from its latest checkpoint whatever its config, so changing
// the config of a run that is far along, or done, should not go unnoticed.
func ConfigChange(before, config []byte) string {
	if before == nil {
		return ""
	}
	var was, is map[string]any
	if json.Unmarshal(before, &was) != nil || json.Unmarshal(config, &is) != nil {
		return ""
	}
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(is)) {
		old, had := was[k]
		switch {
		case !had:
			diffs = append(diffs, fmt.Sprintf("%s %s (new)", k, compactJSON(is[k])))
		case !reflect.DeepEqual(old, is[k]):
			diffs = append(diffs, fmt.Sprintf("%s %s → %s", k, compactJSON(old), compactJSON(is[k])))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(was)) {
		if _, has := is[k]; !has {
			diffs = append(diffs, fmt.Sprintf("%s %s (gone)", k, compactJSON(was[k])))
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	return fmt.Sprintf("the config changed since the last run (%s); training resumes from the latest checkpoint with it (run with -fresh to start afresh)",
		strings.Join(diffs, ", "))
}

func compactJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// MoveAside renames dir to dir.old-<UTC time>, with a counter if that is
// taken, so that a run can start over without deleting a user's
// checkpoints; "" when dir does not exist.
func MoveAside(dir string, now time.Time) (string, error) {
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
