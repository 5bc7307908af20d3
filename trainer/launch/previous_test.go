package launch

import (
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
	last := filepath.Join(t.TempDir(), LastConfigFile)
	must.Eq(t, "", ConfigChange(last, []byte(`{"lr":0.1}`)), must.Sprint("no last config"))
	must.NoError(t, os.WriteFile(last, []byte(`{"lr":0.1,"epochs":20,"seed":1,"layers":[8,8]}`), 0o644))
	must.Eq(t, "", ConfigChange(last, []byte(`{"epochs":20,"layers":[8,8],"lr":0.1,"seed":1}`)))
	note := ConfigChange(last, []byte(`{"lr":0.01,"epochs":20,"momentum":0.9,"layers":[8,16]}`))
	must.StrContains(t, note, "(layers [8,8] → [8,16], lr 0.1 → 0.01, momentum 0.9 (new), seed 1 (gone))")
	must.StrContains(t, note, "run with -fresh to start afresh")
	must.Eq(t, "", ConfigChange("", []byte(`{}`)))
}
