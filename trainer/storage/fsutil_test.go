package storage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// placeDir renames a directory into place when nothing is there, merges
// it into a directory that holds other files, and never replaces one.
func TestPlaceDir(t *testing.T) {
	root := t.TempDir()
	src := func(files map[string]string) string {
		dir, err := os.MkdirTemp(root, "src-")
		must.NoError(t, err)
		writeTree(t, dir, files)
		return dir
	}
	gone := func(dir string) {
		_, err := os.Lstat(dir)
		must.True(t, os.IsNotExist(err), must.Sprintf("%s is still there: %v", dir, err))
	}

	dst := filepath.Join(root, "copy")
	a := src(map[string]string{"model.bin": "weights", "opt/state": "moments"})
	must.NoError(t, placeDir(a, dst))
	gone(a)
	must.Eq(t, map[string]string{"model.bin": "weights", "opt/state": "moments"}, readTree(t, dst))

	b := src(map[string]string{"rank1.bin": "other rank", "opt/more": "x"})
	must.NoError(t, placeDir(b, dst))
	gone(b)
	must.Eq(t, map[string]string{"model.bin": "weights", "opt/state": "moments", "rank1.bin": "other rank", "opt/more": "x"}, readTree(t, dst))

	c := src(map[string]string{"model.bin": "a different model"})
	must.ErrorIs(t, placeDir(c, dst), ErrExists)
	must.Eq(t, "weights", readTree(t, dst)["model.bin"])
	must.Eq(t, map[string]string{"model.bin": "a different model"}, readTree(t, c))
}
