package nn

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
)

// BackendEnv is the environment variable that picks a worker's matmul
// backend without code changes: "gonum" (the default), "parallel" or
// "parallel:N" (N goroutines), "openblas", or "openblas:N" (N OpenBLAS
// threads; the setting is the process's, OpenBLAS having one pool).
const BackendEnv = "NOMAD_TRAIN_BLAS"

// ErrBackendUnavailable is wrapped when the backend asked for cannot be
// used here (not compiled in, library not installed).
var ErrBackendUnavailable = errors.New("matmul backend unavailable")

// NewBackend returns the backend called name (see BackendEnv) and a
// function that releases it (stops a Parallel's goroutines); the release
// function is never nil. An unknown or unavailable name is an error that
// says what to do, never a silent fallback.
func NewBackend(name string) (Backend, func(), error) {
	noop := func() {}
	kind, arg, _ := strings.Cut(strings.ToLower(strings.TrimSpace(name)), ":")
	switch kind {
	case "", "gonum":
		return Gonum{}, noop, nil
	case "parallel":
		n, err := threadsArg(name, kind, arg, 2)
		if err != nil {
			return nil, noop, err
		}
		p := NewParallel(n)
		return p, p.Close, nil
	case "openblas":
		n, err := threadsArg(name, kind, arg, 0)
		if err != nil {
			return nil, noop, err
		}
		be, err := openOpenBLAS(n)
		if err != nil {
			return nil, noop, err
		}
		return be, noop, nil
	}
	return nil, noop, fmt.Errorf("matmul backend %q: unknown (want gonum, parallel[:N] or openblas[:N])", name)
}

// threadsArg parses the N of "kind:N", def when there is none.
func threadsArg(name, kind, arg string, def int) (int, error) {
	if arg == "" {
		return def, nil
	}
	v, err := strconv.Atoi(arg)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("matmul backend %q: want %s:N with N ≥ 1", name, kind)
	}
	return v, nil
}

// BackendFromEnv is NewBackend of the BackendEnv variable read through
// getenv (os.Getenv in production).
func BackendFromEnv(getenv func(string) string) (Backend, func(), error) {
	be, release, err := NewBackend(getenv(BackendEnv))
	if err != nil {
		return nil, release, fmt.Errorf("%s: %w", BackendEnv, err)
	}
	return be, release, nil
}

// WorkerBackendFromEnv is BackendFromEnv for one of localWorkers worker
// processes that share this machine's cores (Session.LocalWorldSize): a
// threaded backend named without a count ("parallel", "openblas") gets an
// equal share of the CPUs, runtime.NumCPU()/localWorkers and at least 1,
// instead of one thread per CPU in every worker, which oversubscribes the
// cores (torchrun likewise gives each of several local workers
// OMP_NUM_THREADS=1). An explicit ":N" is kept.
func WorkerBackendFromEnv(getenv func(string) string, localWorkers int) (Backend, func(), error) {
	name := getenv(BackendEnv)
	kind, arg, _ := strings.Cut(strings.ToLower(strings.TrimSpace(name)), ":")
	if localWorkers > 1 && arg == "" && (kind == "parallel" || kind == "openblas") {
		name = kind + ":" + strconv.Itoa(max(1, runtime.NumCPU()/localWorkers))
	}
	be, release, err := NewBackend(name)
	if err != nil {
		return nil, release, fmt.Errorf("%s: %w", BackendEnv, err)
	}
	return be, release, nil
}
