package trainer

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
)

// The files of every rank's checkpoint directory land in one checkpoint
// directory (Report), so a file name may come from one rank only.
// Directories merge: rank 0's shard/a and rank 1's shard/b make shard/ with
// both. checkNames says which rule a report broke before anything is
// moved, so the report fails at once with the rule rather than half-staged.

// checkNames returns an error naming the first path that more than one
// rank put in its checkpoint directory (as a file in one and anything in
// the other). dirs maps rank to its reported directory.
func checkNames(dirs map[int]string) error {
	type owner struct {
		rank int
		dir  bool
	}
	seen := map[string]owner{}
	ranks := make([]int, 0, len(dirs))
	for r := range dirs {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	for _, r := range ranks {
		root := dirs[r]
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil || rel == "." {
				return err
			}
			prev, ok := seen[rel]
			if !ok {
				seen[rel] = owner{rank: r, dir: d.IsDir()}
				return nil
			}
			if prev.dir && d.IsDir() {
				return nil
			}
			return fmt.Errorf("ranks %d and %d both put %q in the checkpoint: every rank's checkpoint files land in one checkpoint directory, "+
				"so a name may come from one rank only (save shared state on rank 0 alone, or put the rank in the name, such as %s)",
				prev.rank, r, filepath.ToSlash(rel), filepath.ToSlash(filepath.Join(fmt.Sprintf("rank-%d", r), rel)))
		})
		if err != nil {
			return err
		}
	}
	return nil
}
