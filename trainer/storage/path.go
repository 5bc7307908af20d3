package storage

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Names inside a run directory. Entries starting with a dot are the
// package's scratch space and are removed by Open.
const (
	checkpointPrefix = "checkpoint_"
	stagingPrefix    = ".staging-"
	trashPrefix      = ".trash-"
	tempPrefix       = ".tmp-"
	lockFile         = ".writer.lock"
)

// schemeRE matches the scheme of a URI such as "s3://bucket/prefix".
var schemeRE = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*)://`)

// localRoot turns a storage path into a local directory. Plain paths and
// file:// URIs are accepted; any other scheme is ErrUnsupportedScheme.
func localRoot(root string) (string, error) {
	if root == "" {
		return "", fmt.Errorf("empty storage path")
	}
	m := schemeRE.FindStringSubmatch(root)
	if m == nil {
		return filepath.Clean(root), nil
	}
	if !strings.EqualFold(m[1], "file") {
		return "", fmt.Errorf("%w %q in storage path %q (only local or mounted directories are supported)", ErrUnsupportedScheme, m[1], root)
	}
	u, err := url.Parse(root)
	if err != nil {
		return "", fmt.Errorf("parsing storage path %q: %w", root, err)
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", fmt.Errorf("%w: file URI with host %q in %q", ErrUnsupportedScheme, u.Host, root)
	}
	if u.Path == "" {
		return "", fmt.Errorf("empty path in storage path %q", root)
	}
	return filepath.Clean(u.Path), nil
}

// LocalDir is the local directory a storage path names (a plain path or a
// file:// URI); any other scheme is ErrUnsupportedScheme.
func LocalDir(root string) (string, error) { return localRoot(root) }

// Rebase resolves a relative local storage path against dir, the working
// directory of the process that will use it (a Nomad task's directory, say).
// Absolute paths and URIs are returned as they are.
func Rebase(root, dir string) string {
	if root == "" || schemeRE.MatchString(root) || filepath.IsAbs(root) {
		return root
	}
	return filepath.Join(dir, root)
}

// checkRunName rejects names that would escape the storage path or collide
// with the package's scratch names.
func checkRunName(run string) error {
	switch {
	case run == "":
		return fmt.Errorf("empty run name")
	case strings.ContainsAny(run, `/\`) || strings.ContainsRune(run, 0):
		return fmt.Errorf("run name %q contains a path separator", run)
	case strings.HasPrefix(run, "."):
		return fmt.Errorf("run name %q starts with a dot", run)
	}
	return nil
}

// checkpointName is the directory name of checkpoint index.
func checkpointName(index int64) string {
	return fmt.Sprintf("%s%06d", checkpointPrefix, index)
}

// IsCheckpointName reports whether s is a checkpoint's name
// (checkpoint_NNNNNN), as storage gives them.
func IsCheckpointName(s string) bool {
	_, ok := checkpointIndex(s)
	return ok
}

// checkpointIndex parses a directory name made by checkpointName.
func checkpointIndex(name string) (int64, bool) {
	digits, ok := strings.CutPrefix(name, checkpointPrefix)
	if !ok || len(digits) < 6 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 0 || checkpointName(n) != name {
		return 0, false
	}
	return n, true
}
