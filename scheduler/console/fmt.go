package console

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/nomad-train/nomad-train/trainspec"
)

// StdinPath names standard input among fmt's arguments.
const StdinPath = "-"

// Fmt is `nomad-train fmt`: what to do with each file.
type Fmt struct {
	// Check lists the files that are not formatted; Write rewrites them
	// in place and lists those changed; neither prints each formatted.
	Check, Write bool
	// Stdin is read for StdinPath.
	Stdin io.Reader
}

// Run formats paths (a directory stands for every *.hcl file below it),
// printing as f says to stdout and errors to stderr. It returns false
// when a file had errors or, with Check, was not formatted.
func (f Fmt) Run(paths []string, stdout, stderr io.Writer) bool {
	sort.Strings(paths)
	paths, err := expandFmtPaths(paths)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train fmt: %v\n", err)
		return false
	}
	ok := true
	parser := hclparse.NewParser()
	for _, path := range paths {
		src, err := f.read(path)
		if err != nil {
			fmt.Fprintf(stderr, "nomad-train fmt: %v\n", err)
			ok = false
			continue
		}
		out, diags := trainspec.Format(src, path)
		if diags.HasErrors() {
			parser.AddFile(path, &hcl2.File{Bytes: src})
			PrintDiagnostics(stderr, parser, diags)
			ok = false
			continue
		}
		changed := !bytes.Equal(src, out)
		switch {
		case f.Check:
			if changed {
				fmt.Fprintln(stdout, path)
				ok = false
			}
		case f.Write && path != StdinPath: // "-" has no file to rewrite: print it
			if changed {
				if err := os.WriteFile(path, out, 0o644); err != nil {
					fmt.Fprintf(stderr, "nomad-train fmt: %v\n", err)
					ok = false
					continue
				}
				fmt.Fprintln(stdout, path)
			}
		default:
			if _, err := stdout.Write(out); err != nil {
				fmt.Fprintf(stderr, "nomad-train fmt: %v\n", err)
				return false
			}
		}
	}
	return ok
}

// expandFmtPaths replaces each directory among paths with the *.hcl files
// below it, recursively, so that fmt can be pointed at a tree of specs.
// Files named directly are kept whatever their extension; "-" stays as is.
func expandFmtPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		if p == StdinPath {
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

// read reads one of fmt's inputs: a file, or standard input for "-".
func (f Fmt) read(path string) ([]byte, error) {
	if path == StdinPath {
		b, err := io.ReadAll(f.Stdin)
		if err != nil {
			return nil, fmt.Errorf("read standard input: %w", err)
		}
		return b, nil
	}
	return os.ReadFile(path)
}
