//go:build !cgo

package nn

import "fmt"

// openOpenBLAS fails: without cgo the library cannot be called.
func openOpenBLAS(int) (Backend, error) {
	return nil, fmt.Errorf("%w: openblas: this binary was built without cgo (CGO_ENABLED=0); rebuild with cgo", ErrBackendUnavailable)
}
