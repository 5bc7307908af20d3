package tune

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// StateFile is the experiment state inside the experiment directory.
const StateFile = "experiment_state.json"

// Trial statuses.
const (
	StatusPending    = "PENDING"    // not started, or waiting to restart
	StatusRunning    = "RUNNING"    // placed by the backend
	StatusTerminated = "TERMINATED" // the training function finished
	StatusStopped    = "STOPPED"    // stopped by the scheduler or the time budget
	StatusError      = "ERROR"      // failed more often than its budget allows
)

// finished reports whether a status is final.
func finished(status string) bool {
	return status == StatusTerminated || status == StatusStopped || status == StatusError
}

// TrialState is one trial in the experiment state.
type TrialState struct {
	ID     string         `json:"id"`
	Config map[string]any `json:"config"`
	// Params are the sampled values, by path, for tables.
	Params map[string]any `json:"params,omitempty"`
	Status string         `json:"status"`
	// Failures counts failed attempts (the trial's failure budget).
	Failures int `json:"failures,omitempty"`
	// Reason says why a trial stopped or failed.
	Reason string `json:"reason,omitempty"`
	// Iterations counts the trial's own reports (cloned ones excluded).
	Iterations int `json:"iterations"`
	// LastResult is the latest reported metrics.
	LastResult map[string]any `json:"last_result,omitempty"`
	// Exploits lists the PBT exploits, oldest first.
	Exploits []ExploitRecord `json:"exploits,omitempty"`
}

// ExploitRecord is one PBT exploit of a trial.
type ExploitRecord struct {
	Donor string  `json:"donor"`
	Time  float64 `json:"time"` // the donor's time attribute at its checkpoint
}

// ExperimentState is the persisted state of an experiment, rewritten
// atomically after every change of a trial's status.
type ExperimentState struct {
	Version int           `json:"version"`
	Name    string        `json:"name"`
	Elapsed time.Duration `json:"elapsed_ns"` // time spent in earlier Fit calls
	Trials  []*TrialState `json:"trials"`
}

// LoadState reads an experiment's state; ok is false when there is none.
func LoadState(expDir string) (st *ExperimentState, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(expDir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read experiment state: %w", err)
	}
	st = &ExperimentState{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, false, fmt.Errorf("decode experiment state %s: %w", filepath.Join(expDir, StateFile), err)
	}
	for _, t := range st.Trials {
		t.Config = normalizeNumbers(t.Config).(map[string]any)
	}
	return st, true, nil
}

// save writes the state atomically: a temporary file, flushed, renamed over
// the old one, and the directory flushed.
func (s *ExperimentState) save(expDir string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode experiment state: %w", err)
	}
	return writeAtomic(filepath.Join(expDir, StateFile), append(b, '\n'))
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("flush directory of %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("flush directory of %s: %w", path, err)
	}
	return nil
}

// normalizeNumbers turns whole float64s (as JSON decodes every number)
// into ints, so a config read back equals the one sampled.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case float64:
		if x == float64(int(x)) && x < 1<<53 && x > -(1<<53) {
			return int(x)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
	}
	return v
}
