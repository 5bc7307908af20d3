//go:build !linux

package collective

import (
	"errors"
	"os"
)

// errNoShm: the shared-memory transport is built for Linux only; elsewhere
// every connection uses TCP.
var errNoShm = errors.New("shared memory transport is only built for linux")

func hostIdentity() (string, error)                      { return "", errNoShm }
func defaultShmDir() string                              { return os.TempDir() }
func createRegion(string, int) ([]byte, *os.File, error) { return nil, nil, errNoShm }
func openRegion(string, int) ([]byte, error)             { return nil, errNoShm }
func unmap([]byte) error                                 { return nil }

// SweepRegions has nothing to sweep where no shared file is ever made.
func SweepRegions(string) ([]string, error) { return nil, nil }
