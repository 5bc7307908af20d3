package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Worker output of a local run is kept under the run's directory, one
// file per rank, so that `nomad-train logs` can show it after the run, as
// Nomad keeps a task's logs. Each file is capped: when a write would take
// it past LogCap it is renamed to the same name with ".1" (replacing the
// older one) and a new file begins, so a rank keeps at most two files.
const (
	// LogDir is the directory of the workers' logs, in the run directory.
	LogDir = "logs"
	// LogCap is the size at which a rank's log file is rotated.
	LogCap = 10 << 20
)

// LogPath is rank's log file in runDir; LogPath(...)+".1" is the older one.
func LogPath(runDir string, rank int) string {
	return filepath.Join(runDir, LogDir, "rank-"+strconv.Itoa(rank)+".log")
}

// rotatingFile appends to a file and rotates it at a size cap. A write it
// cannot make is dropped: a full disk costs the saved log, not the run.
type rotatingFile struct {
	path string
	cap  int64

	mu   sync.Mutex // guards below
	f    *os.File
	size int64
}

// openRotating opens path for appending (a replaced worker continues its
// rank's file).
func openRotating(path string, cap int64) (*rotatingFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("make log dir: %w", err)
	}
	r := &rotatingFile{path: path, cap: cap}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rotatingFile) open() error {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open worker log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open worker log: %w", err)
	}
	r.f, r.size = f, fi.Size()
	return nil
}

// Write appends b, first rotating when b would take the file past the cap
// (a file holds at least one write, however large).
func (r *rotatingFile) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil && r.size > 0 && r.size+int64(len(b)) > r.cap {
		r.f.Close()
		r.f = nil
		_ = os.Rename(r.path, r.path+".1") // failing, the file grows: the log is best effort
		_ = r.open()
	}
	if r.f == nil {
		return len(b), nil
	}
	n, _ := r.f.Write(b)
	r.size += int64(n)
	return len(b), nil
}

// Close closes the file.
func (r *rotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
