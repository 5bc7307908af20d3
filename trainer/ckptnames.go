package trainer

import (
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The files of every rank's checkpoint directory land in one checkpoint
// (Report), so a file name may come from one rank only. Directories
// merge: rank 0's shard/a and rank 1's shard/b make shard/ with both.
// checkNames says which rule a report broke before anything is moved or
// uploaded, so the report fails at once with the rule rather than
// half-staged. It works on lists of names, which ranks that share no
// directory can send each other.

// checkNames returns an error naming the first path that more than one
// rank put in its checkpoint (as a file in one and anything in the
// other). files maps rank to the "/"-separated paths of its files.
func checkNames(files map[int][]string) error {
	type owner struct {
		rank int
		dir  bool
	}
	seen := map[string]owner{}
	ranks := make([]int, 0, len(files))
	for r := range files {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	for _, r := range ranks {
		for _, f := range slices.Sorted(slices.Values(files[r])) {
			parts := strings.Split(f, "/")
			for i := 1; i <= len(parts); i++ {
				p, isDir := path.Join(parts[:i]...), i < len(parts)
				prev, ok := seen[p]
				switch {
				case !ok:
					seen[p] = owner{rank: r, dir: isDir}
				case prev.dir && isDir, prev.rank == r:
				default:
					return fmt.Errorf("ranks %d and %d both put %q in the checkpoint: every rank's checkpoint files land in one checkpoint directory, "+
						"so a name may come from one rank only (save shared state on rank 0 alone, or put the rank in the name, such as %s)",
						prev.rank, r, p, path.Join(fmt.Sprintf("rank-%d", r), p))
				}
			}
		}
	}
	return nil
}

// treeFiles lists the "/"-separated paths of everything but directories
// under root.
func treeFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing checkpoint directory %s: %w", root, err)
	}
	return out, nil
}
