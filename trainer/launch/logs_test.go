package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// A rank's log is rotated at its cap into one older file: the newest
// output is whole in the two files, and no more than two are kept.
func TestRotatingFileCap(t *testing.T) {
	path := LogPath(t.TempDir(), 3)
	must.EqOp(t, "rank-3.log", filepath.Base(path))
	r, err := openRotating(path, 10)
	must.NoError(t, err)
	for _, w := range []string{"aaaa\n", "bbbb\n", "cccc\n", "dddd\n", "a line longer than the cap\n", "e\n"} {
		n, err := r.Write([]byte(w))
		must.NoError(t, err)
		must.EqOp(t, len(w), n)
	}
	must.NoError(t, r.Close())
	cur, err := os.ReadFile(path)
	must.NoError(t, err)
	old, err := os.ReadFile(path + ".1")
	must.NoError(t, err)
	must.EqOp(t, "e\n", string(cur))
	must.EqOp(t, "a line longer than the cap\n", string(old))
	entries, err := os.ReadDir(filepath.Dir(path))
	must.NoError(t, err)
	must.SliceLen(t, 2, entries)

	// A replacement worker's log continues the rank's file.
	r, err = openRotating(path, 10)
	must.NoError(t, err)
	r.Write([]byte("f\n"))
	r.Close()
	cur, _ = os.ReadFile(path)
	must.EqOp(t, "e\nf\n", string(cur))
	must.False(t, strings.Contains(string(old), "dddd"))
}
