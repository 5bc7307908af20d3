package trainer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// The per-user memory directory is used only when it is this user's own
// private directory: one another user made first (open to others, or a
// link to elsewhere) would let them read or swap the checkpoints.
func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	dir, err := privateDir(filepath.Join(base, "fresh"))
	must.NoError(t, err)
	fi, err := os.Stat(dir)
	must.NoError(t, err)
	must.EqOp(t, os.FileMode(0o700), fi.Mode().Perm())
	_, err = privateDir(dir)
	must.NoError(t, err, must.Sprint("ours already"))

	open := filepath.Join(base, "open")
	must.NoError(t, os.Mkdir(open, 0o700))
	must.NoError(t, os.Chmod(open, 0o777))
	_, err = privateDir(open)
	must.ErrorContains(t, err, "open to other users")

	link := filepath.Join(base, "link")
	must.NoError(t, os.Symlink(dir, link))
	_, err = privateDir(link)
	must.ErrorContains(t, err, "not a directory")
}
