package trainer

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
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

// The node's checkpoint cache on an object store is the user's own
// private directory; where that directory is open to others (someone made
// it first, to plant a checkpoint a rank would restore unhashed), the
// rank keeps a fresh private cache of its own instead, never one inside
// the open directory.
func TestNodeCacheIsPrivate(t *testing.T) {
	base := t.TempDir()
	old := nodeCacheBase
	nodeCacheBase = func(int) string { return base }
	t.Cleanup(func() { nodeCacheBase = old })
	env := workerenv.Env{StoragePath: "s3://bucket/runs", RunName: "r"}
	s := &Session{log: hclog.NewNullLogger()}
	must.NoError(t, s.openNodeCache(env))
	shared := filepath.Join(base, fmt.Sprintf("nomad-train-%d", os.Getuid()))
	must.EqOp(t, shared, filepath.Dir(s.cache))
	fi, err := os.Stat(shared)
	must.NoError(t, err)
	must.EqOp(t, os.FileMode(0o700), fi.Mode().Perm())
	again := &Session{log: hclog.NewNullLogger()}
	must.NoError(t, again.openNodeCache(env))
	must.EqOp(t, s.cache, again.cache, must.Sprint("the ranks of a node share it"))

	must.NoError(t, os.Chmod(shared, 0o777)) // as another user's would be
	planted := &Session{log: hclog.NewNullLogger()}
	must.NoError(t, planted.openNodeCache(env))
	must.StrHasPrefix(t, filepath.Join(base, "nomad-train-cache-"), planted.cache)
	fi, err = os.Stat(planted.cache)
	must.NoError(t, err)
	must.EqOp(t, os.FileMode(0o700), fi.Mode().Perm())

	dir := &Session{log: hclog.NewNullLogger()}
	must.NoError(t, dir.openNodeCache(workerenv.Env{StoragePath: base, RunName: "r"}))
	must.EqOp(t, "", dir.cache, must.Sprint("a directory storage path has no node cache"))
}
