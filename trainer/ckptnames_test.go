package trainer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// Two ranks may not put the same file in a checkpoint; directories merge.
func TestCheckNames(t *testing.T) {
	write := func(t *testing.T, root string, files ...string) string {
		for _, f := range files {
			p := filepath.Join(root, f)
			must.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			must.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
		}
		return root
	}
	cases := []struct {
		name   string
		files  map[int][]string
		errHas string // "" for no error
	}{
		{"distinct names", map[int][]string{0: {"model.pt"}, 1: {"optim-1.pt"}}, ""},
		{"shared directory, distinct files", map[int][]string{0: {"shard/0.pt"}, 1: {"shard/1.pt"}}, ""},
		{"rank directories", map[int][]string{0: {"rank-0/model.pt"}, 1: {"rank-1/model.pt"}}, ""},
		{"same file", map[int][]string{0: {"model.pt"}, 2: {"model.pt"}}, `ranks 0 and 2 both put "model.pt"`},
		{"same nested file", map[int][]string{0: {"a/b.pt"}, 1: {"a/b.pt"}}, `"a/b.pt"`},
		{"file against directory", map[int][]string{0: {"x"}, 1: {"x/y"}}, `"x"`},
		{"directory against file", map[int][]string{0: {"x/y/z"}, 1: {"x/y"}}, `ranks 0 and 1 both put "x/y"`},
		{"one rank, nested", map[int][]string{0: {"a/b", "a/c/d"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lists := map[int][]string{}
			for r, files := range tc.files {
				var err error
				lists[r], err = treeFiles(write(t, t.TempDir(), files...))
				must.NoError(t, err)
			}
			err := checkNames(lists)
			if tc.errHas == "" {
				must.NoError(t, err)
				return
			}
			must.ErrorContains(t, err, tc.errHas)
			must.ErrorContains(t, err, "a name may come from one rank only")
		})
	}
}
