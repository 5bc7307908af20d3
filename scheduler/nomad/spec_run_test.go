package nomad

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// A first run's storage directory may not exist when run starts
// following it: the workers make it. The source looks again at each read.
func TestProgressSourceWaitsForTheStorage(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "")
	root := filepath.Join(t.TempDir(), "not-yet")
	src := EnvProgressFor("", "j", "r", root)
	must.NotNil(t, src)
	_, err := src.Latest(context.Background())
	must.ErrorIs(t, err, ErrNoProgress)
	must.NoError(t, os.MkdirAll(filepath.Join(root, "r"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(root, "r", "progress.jsonl"), []byte(line1+"\n"), 0o644))
	rec, err := src.Latest(context.Background())
	must.NoError(t, err)
	must.Eq(t, 10, rec.Step)
	must.Nil(t, EnvProgressFor("", "j", "r", "relative/results"), must.Sprint("a relative path is the workers'"))
}
