package trainer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// TestOwnCheckpointDir: rank 0 moves the files of each rank's reported
// directory into the checkpoint and removes it, so only that rank's own
// directories from NewCheckpointDir are accepted; a path outside the run
// (a stranger's files) or another rank's directory is refused, links
// resolved first.
func TestOwnCheckpointDir(t *testing.T) {
	runDir := t.TempDir()
	scratch := filepath.Join(runDir, scratchDir)
	s0 := &Session{rank: 0, runDir: runDir, scratch: scratch}
	s1 := &Session{rank: 1, runDir: runDir, scratch: scratch}
	own, err := s1.NewCheckpointDir()
	must.NoError(t, err)
	other, err := s0.NewCheckpointDir()
	must.NoError(t, err)
	stranger := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(stranger, "precious"), []byte("x"), 0o644))
	linkOwn := filepath.Join(t.TempDir(), "link")
	must.NoError(t, os.Symlink(own, linkOwn))
	linkOut := filepath.Join(scratch, "rank1-link")
	must.NoError(t, os.Symlink(stranger, linkOut))
	file := filepath.Join(scratch, "rank1-file")
	must.NoError(t, os.WriteFile(file, nil, 0o644))
	resolvedOwn, err := filepath.EvalSymlinks(own)
	must.NoError(t, err)

	cases := []struct {
		name, path, want string // want: the accepted path, or "" for a refusal
	}{
		{"own", own, resolvedOwn},
		{"own through a link", linkOwn, resolvedOwn},
		{"another rank's", other, ""},
		{"outside the run", stranger, ""},
		{"a link out of the scratch directory", linkOut, ""},
		{"the scratch directory", scratch, ""},
		{"dot dot", filepath.Join(own, "..", ".."), ""},
		{"a file", file, ""},
		{"missing", filepath.Join(scratch, "rank1-gone"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ownCheckpointDir(scratch, 1, tc.path)
			if tc.want == "" {
				must.ErrorContains(t, err, tc.path)
				must.ErrorContains(t, err, "rank 1 reported checkpoint directory")
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
	must.FileExists(t, filepath.Join(stranger, "precious"))
}
