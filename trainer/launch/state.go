package launch

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// StateFile, in a local run's directory, is the launcher's account of the
// run: its workers, their processes, restarts and metrics addresses, and
// how the run ended. The launcher rewrites it (atomically) whenever a
// worker starts or ends; `nomad-train status` reads it.
const StateFile = "launch.json"

// Phases of a local run in its State.
const (
	PhaseRunning  = "running"
	PhaseComplete = "complete"
	PhaseFailed   = "failed"
	PhaseStopped  = "stopped"
	// PhaseLost is a run whose State says running but whose launcher is
	// gone (killed outright, its machine rebooted): read, never written.
	PhaseLost = "lost"
)

// State is what StateFile holds.
type State struct {
	Run        string        `json:"run"`
	Host       string        `json:"host"`
	PID        int           `json:"launcher_pid"`
	Phase      string        `json:"phase"`
	Started    time.Time     `json:"started"`
	Updated    time.Time     `json:"updated"`
	NumWorkers int           `json:"num_workers"`
	Restarts   int           `json:"restarts"`
	Workers    []WorkerState `json:"workers"`
	// Failure says why the run failed, when it did.
	Failure string `json:"failure,omitempty"`
}

// WorkerState is one rank's current (or last) process.
type WorkerState struct {
	Rank     int       `json:"rank"`
	PID      int       `json:"pid"`
	Running  bool      `json:"running"`
	ExitCode int       `json:"exit_code"`
	Signal   string    `json:"signal,omitempty"`
	Restarts int       `json:"restarts"`
	Started  time.Time `json:"started"`
	// Metrics is the URL the worker serves Prometheus metrics at; empty
	// when metrics are off.
	Metrics string `json:"metrics,omitempty"`
	Log     string `json:"log,omitempty"` // its output (see LogPath)
	// Lost is set by ReadState for a worker its state says runs while its
	// launcher is gone: how it ended was never seen (never written).
	Lost bool `json:"-"`
}

// RunDir is the local directory where a local run of run under
// storagePath keeps its launcher's state and its workers' logs: the run's
// own directory, or for a run kept on object storage this machine's
// (objectRunDir). "" when there is none.
func RunDir(storagePath, run string) string {
	if storage.IsObjectPath(storagePath) {
		return objectRunDir(storagePath, run)
	}
	root, err := storage.LocalDir(storagePath)
	if err != nil {
		return ""
	}
	return filepath.Join(root, run)
}

// objectRunDir is where this machine keeps the launcher's files of a run
// kept on object storage, which only the launching machine has: in the
// user's state directory ($XDG_STATE_HOME, else ~/.local/state),
// nomad-train/runs/<bucket>-<digest of the storage path>/<run>. The
// digest tells two prefixes of a bucket apart however the path is
// spelled (a trailing slash, say). "" without a home directory or for a
// location that does not parse.
func objectRunDir(storagePath, run string) string {
	loc, err := objstore.ParseURL(storagePath)
	if err != nil {
		return ""
	}
	base := os.Getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(base) { // unset, or not to be trusted (the spec's)
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			return ""
		}
		base = filepath.Join(home, ".local", "state")
	}
	sum := sha256.Sum256([]byte(loc.String()))
	return filepath.Join(base, "nomad-train", "runs", fmt.Sprintf("%s-%x", loc.Bucket, sum[:6]), run)
}

// ReadState reads the State of the local run in runDir. A run whose
// launcher is no longer alive on this host reads PhaseLost rather than
// PhaseRunning.
func ReadState(runDir string) (State, error) {
	var st State
	b, err := os.ReadFile(filepath.Join(runDir, StateFile))
	if err != nil {
		return st, fmt.Errorf("read launcher state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("decode launcher state %s: %w", filepath.Join(runDir, StateFile), err)
	}
	if st.Phase == PhaseRunning && !launcherAlive(st) {
		st.Phase = PhaseLost
		for i := range st.Workers {
			st.Workers[i].Lost = st.Workers[i].Running
			st.Workers[i].Running = false
		}
	}
	return st, nil
}

// launcherAlive reports whether st's launcher still runs; on another host
// it cannot tell, and says yes.
func launcherAlive(st State) bool {
	if host, _ := os.Hostname(); host != st.Host {
		return true
	}
	if st.PID <= 0 { // kill(0 or -1) would probe process groups, not a pid
		return false
	}
	err := syscall.Kill(st.PID, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// writeState writes st to runDir's StateFile through a temporary file and
// a rename, so a reader never sees half of it.
func writeState(runDir string, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(runDir, StateFile+".tmp") // no dot: storage.Open clears those
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write launcher state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(runDir, StateFile)); err != nil {
		return fmt.Errorf("write launcher state: %w", err)
	}
	return nil
}
