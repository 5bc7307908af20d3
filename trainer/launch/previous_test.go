package launch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestMoveAside(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "run")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	aside, err := MoveAside(dir, now)
	must.NoError(t, err)
	must.Eq(t, "", aside, must.Sprint("nothing to move"))
	for _, want := range []string{dir + ".old-20260102T030405Z", dir + ".old-20260102T030405Z-2"} {
		must.NoError(t, os.MkdirAll(filepath.Join(dir, "checkpoint"), 0o755))
		aside, err = MoveAside(dir, now)
		must.NoError(t, err)
		must.Eq(t, want, aside)
		must.DirExists(t, filepath.Join(aside, "checkpoint"))
		must.DirNotExists(t, dir)
	}
}

func TestConfigChange(t *testing.T) {
	must.Eq(t, "", ConfigChange(nil, []byte(`{"lr":0.1}`)), must.Sprint("no last config"))
	last := []byte(`{"lr":0.1,"epochs":20,"seed":1,"layers":[8,8]}`)
	must.Eq(t, "", ConfigChange(last, []byte(`{"epochs":20,"layers":[8,8],"lr":0.1,"seed":1}`)))
	note := ConfigChange(last, []byte(`{"lr":0.01,"epochs":20,"momentum":0.9,"layers":[8,16]}`))
	must.StrContains(t, note, "(layers [8,8] → [8,16], lr 0.1 → 0.01, momentum 0.9 (new), seed 1 (gone))")
	must.StrContains(t, note, "run with -fresh to start afresh")
}

// The notes of the last launch go through storage: written and read back
// for a run directory (S3 is covered by storage's TestNotes and the S3
// quickstart test).
func TestLastRunNotes(t *testing.T) {
	ctx, root := context.Background(), t.TempDir()
	_, ok := ReadLastRun(ctx, root, "r")
	must.False(t, ok)
	must.Nil(t, ReadLastConfig(ctx, root, "r"))
	WriteLastRun(ctx, root, "r", LastRun{NumWorkers: 3, Complete: true})
	WriteLastConfig(ctx, root, "r", []byte(`{"lr":0.1}`))
	rec, ok := ReadLastRun(ctx, root, "r")
	must.True(t, ok)
	must.Eq(t, LastRun{NumWorkers: 3, Complete: true}, rec)
	must.Eq(t, `{"lr":0.1}`, string(ReadLastConfig(ctx, root, "r")))
}
