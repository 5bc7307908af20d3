package nn

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// BackendEnv is the environment variable that picks a worker's matmul
// backend without code changes: "gonum" (the default), "parallel" or
// "parallel:N" (N goroutines), or "openblas".
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
		n := 2
		if arg != "" {
			v, err := strconv.Atoi(arg)
			if err != nil || v < 1 {
				return nil, noop, fmt.Errorf("matmul backend %q: want parallel:N with N ≥ 1", name)
			}
			n = v
		}
		p := NewParallel(n)
		return p, p.Close, nil
	case "openblas":
		be, err := openOpenBLAS()
		if err != nil {
			return nil, noop, err
		}
		return be, noop, nil
	}
	return nil, noop, fmt.Errorf("matmul backend %q: unknown (want gonum, parallel[:N] or openblas)", name)
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
