// Package testtmp gives a test binary, and every process it starts, one
// private temporary directory that goes when the tests end.
//
// Tests here start real worker processes, often the test binary itself,
// which run a test function up to trainer.Fit and then exit the process:
// their t.TempDir directories, and the scratch directories of launchers
// killed on purpose, are never cleaned by their own process. Pointing
// TMPDIR into a directory the parent removes catches them all.
package testtmp

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Main runs the tests with TMPDIR set to a fresh directory under the
// current one (and XDG_STATE_HOME to one inside it), removes it
// afterwards, and exits with the tests' code. A worker process started by
// a test inherits the parent's TMPDIR and nests its own directory inside
// it.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain with more to do.
func Run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nomad-train-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtmp:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	defer setenv("TMPDIR", dir)()
	// A local run on S3 keeps its launcher's files in the user's state
	// directory (launch.RunDir): in the tests', not in the home directory.
	defer setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))()
	return m.Run()
}

// setenv sets k to v and returns what puts it back.
func setenv(k, v string) (restore func()) {
	prev, had := os.LookupEnv(k)
	os.Setenv(k, v)
	return func() {
		if had {
			os.Setenv(k, prev)
		} else {
			os.Unsetenv(k)
		}
	}
}
