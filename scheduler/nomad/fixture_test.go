package nomad

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
)

// loadRecording reads a recorded sequence of a job's allocation and
// evaluation lists from testdata.
func loadRecording(t *testing.T, name string) *nomadtest.Recording {
	t.Helper()
	r, err := nomadtest.LoadRecording(filepath.Join("testdata", name+".json"))
	must.NoError(t, err)
	must.SliceNotEmpty(t, r.Steps)
	return r
}

func nullLogger() hclog.Logger { return hclog.NewNullLogger() }

// testCtx bounds a test's Follow so a broken tracker fails, not hangs.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
