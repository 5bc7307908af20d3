package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// stdinPath names standard input among fmt's arguments.
const stdinPath = "-"

// fmtStdin is what fmt reads for "-"; tests replace it.
var fmtStdin io.Reader = os.Stdin

// expandFmtPaths replaces each directory among paths with the *.hcl files
// below it, recursively, so that fmt can be pointed at a tree of specs.
// Files named directly are kept whatever their extension; "-" stays as is.
func expandFmtPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		if p == stdinPath {
			out = append(out, p)
			continue
		}
		info, err := os.Stat(p)
		if err != nil || !info.IsDir() {
			out = append(out, p) // a missing file is reported when it is read
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(d.Name(), ".hcl") {
				found = append(found, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("walk %s: %w", p, err)
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}

// readFmtSource reads one of fmt's inputs: a file, or standard input for "-".
func readFmtSource(path string) ([]byte, error) {
	if path == stdinPath {
		b, err := io.ReadAll(fmtStdin)
		if err != nil {
			return nil, fmt.Errorf("read standard input: %w", err)
		}
		return b, nil
	}
	return os.ReadFile(path)
}
