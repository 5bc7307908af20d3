package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Files the executor keeps in Config.StateDir.
const (
	specFile = "spec.json" // what the shim runs, written by Start
	exitFile = "exit.json" // the worker's ExitResult, written by the shim
	logFile  = "shim.log"  // the shim's own log (JSON lines)
)

// State is what the driver persists in Nomad's driver_state to recover a
// running task after the plugin restarts. It is JSON-serialisable.
type State struct {
	// TaskID is Config.TaskID.
	TaskID string
	// ShimPID is the supervisor shim; ShimStartTime its start time in clock
	// ticks since boot (field 22 of /proc/<pid>/stat), to detect pid reuse.
	ShimPID       int
	ShimStartTime uint64
	// PID is the worker process, also its process group id; PIDStartTime
	// guards against pid reuse like ShimStartTime.
	PID          int
	PIDStartTime uint64
	// StateDir is Config.StateDir; StateDirDev and StateDirIno identify
	// the directory the plugin made there (0 in states of earlier
	// versions), which a task could replace by another (statedir.go).
	StateDir    string
	StateDirDev uint64 `json:",omitempty"`
	StateDirIno uint64 `json:",omitempty"`
	// StartedAt is when the worker started.
	StartedAt time.Time
	// Cgroup is the cgroup the worker was placed in; "" when none was
	// usable (Config.CgroupPath may name one that could not be used).
	Cgroup string
	// Config is the task's configuration, kept for Exec after recovery.
	Config Config
}

// ExitResult is how the worker ended.
type ExitResult struct {
	// ExitCode is the exit status; 128+Signal when killed by a signal (the
	// shell convention, as Nomad's own executor reports it).
	ExitCode int
	// Signal is the terminating signal, 0 if the worker exited by itself.
	Signal int
	// OOMKilled is set when the task's cgroup recorded an OOM kill.
	OOMKilled bool
	// Err describes a failure to observe the exit; "" normally.
	Err string
	// At is when the exit was observed.
	At time.Time
}

// Successful reports a clean exit: code 0, no signal, no error.
func (r ExitResult) Successful() bool {
	return r.ExitCode == 0 && r.Signal == 0 && r.Err == "" && !r.OOMKilled
}

// shimSpec is what Start hands the shim in StateDir/spec.json.
type shimSpec struct {
	TaskID string
	Path   string
	Args   []string // argv including argv[0]
	Env    []string
	Dir    string
	Cred   *credential
	Cgroup string // cgroup directory to start the worker in; "" = none
}

// shimStatus is the one message the shim sends back over the status pipe.
type shimStatus struct {
	PID       int    `json:",omitempty"`
	StartTime uint64 `json:",omitempty"`
	Err       string `json:",omitempty"`
	// NotFound and Permission classify Err (not recoverable).
	NotFound   bool `json:",omitempty"`
	Permission bool `json:",omitempty"`
}

// readExitFile returns the exit recorded in st's state dir, or ok=false
// if there is none.
func readExitFile(st State) (res ExitResult, ok bool, err error) {
	dir, err := openStateDir(st.StateDir, st.StateDirDev, st.StateDirIno)
	if errors.Is(err, os.ErrNotExist) {
		return res, false, nil
	}
	if err != nil {
		return res, false, fmt.Errorf("read exit file: %w", err)
	}
	defer dir.Close()
	b, err := readBoundedAt(dir, exitFile, maxExitFile)
	if errors.Is(err, os.ErrNotExist) {
		return res, false, nil
	}
	if err != nil {
		return res, false, fmt.Errorf("read exit file: %w", err)
	}
	if res, err = decodeExitResult(b); err != nil {
		return res, false, err
	}
	return res, true, nil
}

// Bounds on the state files: an exit record is a few hundred bytes; a spec
// carries the task's environment, which Nomad keeps well under this.
const (
	maxExitFile = 64 << 10
	maxSpecFile = 16 << 20
)

// errStateFile is the cause of a state file that is not what the executor
// writes.
var errStateFile = errors.New("invalid state file")

// readBoundedFile reads at most limit bytes of f, failing on a longer
// file or one that is not a regular file.
func readBoundedFile(f *os.File, limit int64) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", errStateFile, f.Name())
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is over %d bytes", errStateFile, f.Name(), limit)
	}
	return b, nil
}

// decodeExitResult decodes exit.json as the shim writes it.
func decodeExitResult(b []byte) (ExitResult, error) {
	var res ExitResult
	if err := json.Unmarshal(b, &res); err != nil {
		return res, fmt.Errorf("decode exit file: %w", err)
	}
	if res.Signal < 0 || res.Signal > 128 || res.ExitCode < -1 || res.ExitCode > 255+128 {
		return res, fmt.Errorf("decode exit file: %w: exit code %d, signal %d", errStateFile, res.ExitCode, res.Signal)
	}
	return res, nil
}

// decodeShimSpec decodes spec.json as Start writes it: a task id, an
// absolute program path and argv, and absolute directories.
func decodeShimSpec(b []byte) (shimSpec, error) {
	var spec shimSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, fmt.Errorf("decode spec: %w", err)
	}
	switch {
	case spec.TaskID == "":
		return spec, fmt.Errorf("decode spec: %w: no task id", errStateFile)
	case !filepath.IsAbs(spec.Path):
		return spec, fmt.Errorf("decode spec: %w: program path %q is not absolute", errStateFile, spec.Path)
	case len(spec.Args) == 0:
		return spec, fmt.Errorf("decode spec: %w: no argv", errStateFile)
	case spec.Dir != "" && !filepath.IsAbs(spec.Dir):
		return spec, fmt.Errorf("decode spec: %w: directory %q is not absolute", errStateFile, spec.Dir)
	case spec.Cgroup != "" && !filepath.IsAbs(spec.Cgroup):
		return spec, fmt.Errorf("decode spec: %w: cgroup %q is not absolute", errStateFile, spec.Cgroup)
	}
	return spec, nil
}
