package tune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// StateFile is the experiment state inside the experiment's place.
const StateFile = storage.ExperimentStateFile

// Trial statuses.
const (
	StatusPending    = "PENDING"    // not started, or waiting to restart
	StatusRunning    = "RUNNING"    // placed by the backend
	StatusTerminated = "TERMINATED" // the training function finished
	StatusStopped    = "STOPPED"    // stopped by the scheduler or the time budget
	StatusError      = "ERROR"      // failed more often than its budget allows (retried by the next Fit)
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
	// Failures counts failed attempts. The failure budget (MaxFailures)
	// counts those after the first FailuresForgiven: when a Fit retries a
	// trial that an earlier one left in ERROR, the trial starts with its
	// whole budget again and Failures keeps the history.
	Failures         int `json:"failures,omitempty"`
	FailuresForgiven int `json:"failures_forgiven,omitempty"`
	// Reason says why a trial stopped or failed.
	Reason string `json:"reason,omitempty"`
	// Iterations counts the trial's own reports (cloned ones excluded).
	Iterations int `json:"iterations"`
	// LastResult is the latest reported metrics.
	LastResult map[string]any `json:"last_result,omitempty"`
	// TimeTotal is the seconds the trial had trained at its latest report
	// (Record.TimeTotal); 0 when the report did not say.
	TimeTotal float64 `json:"time_total_s,omitempty"`
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
	// Metric and Mode are the experiment's, as its last tuner had them:
	// a reader of the state (status) ranks the trials by them.
	Metric string `json:"metric,omitempty"`
	Mode   string `json:"mode,omitempty"`
	// TrialStorage is where the trials keep their runs when on an object
	// store (the experiment's s3:// location), and TrialStorageOptions the
	// store's non-secret options: a reader of the state (the dashboard)
	// finds the trials' records there with the state alone.
	TrialStorage        string                    `json:"trial_storage,omitempty"`
	TrialStorageOptions *workerenv.StorageOptions `json:"trial_storage_options,omitempty"`
	// Written is when LoadState's copy was written (not stored).
	Written time.Time `json:"-"`
}

// LoadState reads the state of the experiment at where (a directory or
// an s3:// location; opts give an object store's options); ok is false
// when there is none.
func LoadState(ctx context.Context, where string, opts ...storage.Option) (st *ExperimentState, ok bool, err error) {
	b, written, err := storage.ReadExperimentState(ctx, where, opts...)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	st, err = decodeState(b)
	if err != nil {
		return nil, false, fmt.Errorf("decode experiment state %s: %w", storage.RunLocation(where, StateFile), err)
	}
	st.Written = written
	return st, true, nil
}

// stateVersion is the version of the experiment state this package writes.
const stateVersion = 1

// decodeState parses an experiment state file and checks what the tuner
// relies on when it resumes: every trial is there (not null) with an ID
// that is unique and names one directory inside the experiment directory
// (the ID is a path and a run name), a known status, and counts that are
// not negative.
func decodeState(b []byte) (*ExperimentState, error) {
	st := &ExperimentState{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, err
	}
	if st.Version > stateVersion {
		return nil, fmt.Errorf("version %d is newer than this program's (%d)", st.Version, stateVersion)
	}
	if st.Elapsed < 0 {
		return nil, fmt.Errorf("negative elapsed time %v", st.Elapsed)
	}
	seen := make(map[string]bool, len(st.Trials))
	for i, t := range st.Trials {
		if t == nil {
			return nil, fmt.Errorf("trial %d is null", i)
		}
		if err := t.validate(); err != nil {
			return nil, fmt.Errorf("trial %d: %w", i, err)
		}
		if seen[t.ID] {
			return nil, fmt.Errorf("trial %d: ID %q appears twice", i, t.ID)
		}
		seen[t.ID] = true
		t.Config = normalizeNumbers(t.Config).(map[string]any)
		if t.Params != nil {
			t.Params = normalizeNumbers(t.Params).(map[string]any)
		}
	}
	return st, nil
}

// validate checks one trial of a decoded state.
func (t *TrialState) validate() error {
	if t.ID == "" || t.ID == "." || !filepath.IsLocal(t.ID) || strings.ContainsAny(t.ID, `/\`) {
		return fmt.Errorf("ID %q is not the name of one directory", t.ID)
	}
	switch t.Status {
	case StatusPending, StatusRunning, StatusTerminated, StatusStopped, StatusError:
	default:
		return fmt.Errorf("%s: unknown status %q", t.ID, t.Status)
	}
	if t.Failures < 0 || t.FailuresForgiven < 0 || t.Iterations < 0 {
		return fmt.Errorf("%s: negative count (failures %d, forgiven %d, iterations %d)",
			t.ID, t.Failures, t.FailuresForgiven, t.Iterations)
	}
	return nil
}

// Best returns the trial whose last result is best by the state's metric
// and mode, as the state last recorded it (ResultGrid.Best, scope last,
// reads the trials' own records); ok is false when the state names no
// metric or no trial reported it.
func (s *ExperimentState) Best() (t *TrialState, ok bool) {
	if s.Metric == "" || (s.Mode != ModeMin && s.Mode != ModeMax) {
		return nil, false
	}
	i := bestTrial(len(s.Trials), s.Metric, s.Mode, func(i int) []map[string]any {
		return []map[string]any{s.Trials[i].LastResult}
	})
	if i < 0 {
		return nil, false
	}
	return s.Trials[i], true
}

// encode renders the state as the file's contents.
func (s *ExperimentState) encode() ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode experiment state: %w", err)
	}
	return append(b, '\n'), nil
}

// stateWriter writes state snapshots in the background, so the tuner's
// loop never waits for an fsync or a PUT: each snapshot is written whole
// (storage.Experiment.WriteState); when snapshots come faster than the
// storage takes them, only the newest waiting one is
// written. A crash may thus lose the last few changes; restore reconciles
// them from the trials' progress files, which are the source of truth for
// results.
type stateWriter struct {
	write func([]byte) error
	kick  chan struct{} // capacity 1: "a snapshot waits"
	done  chan struct{} // closed when the goroutine has exited

	mu      sync.Mutex // guards below
	pending []byte
	closed  bool
	err     error // sticky: the first write error
}

func newStateWriter(write func([]byte) error) *stateWriter {
	w := &stateWriter{write: write, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w
}

// submit queues a snapshot and returns the first write error so far.
func (w *stateWriter) submit(b []byte) error {
	w.mu.Lock()
	w.pending = b
	err := w.err
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default: // already signalled; the writer takes the newest
	}
	return err
}

func (w *stateWriter) run() {
	defer close(w.done)
	for range w.kick {
		w.mu.Lock()
		b, closed := w.pending, w.closed
		w.pending = nil
		w.mu.Unlock()
		if b != nil {
			if err := w.write(b); err != nil {
				w.mu.Lock()
				if w.err == nil {
					w.err = err
				}
				w.mu.Unlock()
			}
		}
		if closed {
			return
		}
	}
}

// close writes the last snapshot, stops the goroutine and returns the
// first write error.
func (w *stateWriter) close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
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
