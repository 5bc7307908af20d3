package executor

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
	"golang.org/x/sys/unix"
)

// The log directory is the task's to write: a link there, or the
// directory made a link, must not have root create or append to a file
// the task chose; a file of the plugin's own is appended to, a missing
// one created.
func TestOpenOutputRefusesWhatATaskCanPlant(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	target := filepath.Join(base, "root-only")
	must.NoError(t, os.Mkdir(target, 0o700))
	precious := filepath.Join(target, "precious")
	must.NoError(t, os.WriteFile(precious, []byte("keep\n"), 0o600))

	// The directory a link to another: nothing is created there.
	logs := filepath.Join(base, "logs")
	must.NoError(t, os.Symlink(target, logs))
	_, err := openOutput(ctx, filepath.Join(logs, ".w.stdout.fifo"))
	must.Error(t, err)
	_, err = os.Stat(filepath.Join(target, ".w.stdout.fifo"))
	must.ErrorIs(t, err, os.ErrNotExist)

	real := filepath.Join(base, "real")
	must.NoError(t, os.Mkdir(real, 0o777))
	// The file a link, soft or hard, to another file: refused.
	must.NoError(t, os.Symlink(precious, filepath.Join(real, "soft")))
	_, err = openOutput(ctx, filepath.Join(real, "soft"))
	must.Error(t, err)
	must.NoError(t, os.Link(precious, filepath.Join(real, "hard")))
	_, err = openOutput(ctx, filepath.Join(real, "hard"))
	must.ErrorContains(t, err, "2 links")
	b, err := os.ReadFile(precious)
	must.NoError(t, err)
	must.EqOp(t, "keep\n", string(b))

	// A missing file is created; the plugin's own file is appended to.
	f, err := openOutput(ctx, filepath.Join(real, "out.log"))
	must.NoError(t, err)
	_, _ = f.WriteString("one\n")
	must.NoError(t, f.Close())
	f, err = openOutput(ctx, filepath.Join(real, "out.log"))
	must.NoError(t, err)
	_, _ = f.WriteString("two\n")
	must.NoError(t, f.Close())
	b, err = os.ReadFile(filepath.Join(real, "out.log"))
	must.NoError(t, err)
	must.EqOp(t, "one\ntwo\n", string(b))

	// Neither a FIFO nor a regular file.
	must.NoError(t, os.Mkdir(filepath.Join(real, "dir"), 0o700))
	_, err = openOutput(ctx, filepath.Join(real, "dir"))
	must.ErrorContains(t, err, "neither a FIFO nor a regular file")

	if os.Geteuid() == 0 { // another user's file, in a directory the task owns
		other := filepath.Join(real, "others")
		must.NoError(t, os.WriteFile(other, nil, 0o666))
		must.NoError(t, os.Chown(other, nobody, nobody))
		_, err = openOutput(ctx, other)
		must.ErrorContains(t, err, "not the plugin's own file (owner uid 65534")
	}

	// "" and /dev/null are /dev/null.
	for _, p := range []string{"", os.DevNull} {
		f, err := openOutput(ctx, p)
		must.NoError(t, err)
		var st unix.Stat_t
		must.NoError(t, unix.Fstat(int(f.Fd()), &st))
		must.EqOp(t, uint32(unix.S_IFCHR), st.Mode&unix.S_IFMT)
		must.NoError(t, f.Close())
	}
}
