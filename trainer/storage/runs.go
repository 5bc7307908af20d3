package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// ListRuns returns the names of the runs kept under the storage path
// root, sorted: the entries that hold progress records (a directory with
// progress.jsonl; on an object store a prefix with progress segments).
// Scratch names (starting with a dot) are never runs. A root no run has
// written to yet holds none. Of opts only WithObjectConfig (or
// WithStorageOptions) counts, for an s3:// root.
func ListRuns(ctx context.Context, root string, opts ...Option) ([]string, error) {
	if IsObjectPath(root) {
		st, err := objstore.Open(ctx, root, objectConfig(opts))
		if err != nil {
			return nil, fmt.Errorf("listing runs: %w", err)
		}
		return listObjectRuns(ctx, st)
	}
	return listLocal(root, "runs", func(dir string) bool { return isLocalRun(dir) })
}

// listLocal returns the names of the directories under a local root that
// could be runs and that keep says hold what is listed ("runs"), sorted.
func listLocal(root, what string, keep func(dir string) bool) ([]string, error) {
	dir, err := localRoot(root)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && checkRunName(e.Name()) == nil && keep(filepath.Join(dir, e.Name())) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// listObjectRuns lists the names under st's prefix, then keeps those
// with a progress segment.
func listObjectRuns(ctx context.Context, st *objstore.Store) ([]string, error) {
	return listObject(ctx, st, "runs", func(name string) (bool, error) {
		return st.Any(ctx, name+"/"+objProgressDir)
	})
}

// listObject lists the names under st's prefix that could be runs, then
// keeps those keep says hold what is listed: one request per page of
// names and one per name.
func listObject(ctx context.Context, st *objstore.Store, what string, keep func(name string) (bool, error)) ([]string, error) {
	names, err := st.ListDirs(ctx, "")
	if err != nil { // a missing bucket too: ErrNotFound
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	var out []string
	for _, name := range names {
		if checkRunName(name) != nil {
			continue
		}
		ok, err := keep(name)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", what, err)
		}
		if ok {
			out = append(out, name)
		}
	}
	return out, nil
}

// IsRun reports whether the storage path root holds progress records of
// the run named run. Of opts only WithObjectConfig counts.
func IsRun(ctx context.Context, root, run string, opts ...Option) (bool, error) {
	if err := checkRunName(run); err != nil {
		return false, err
	}
	if IsObjectPath(root) {
		st, err := objstore.Open(ctx, root, objectConfig(opts))
		if err != nil {
			return false, err
		}
		ok, err := st.Any(ctx, run+"/"+objProgressDir)
		if err != nil {
			return false, fmt.Errorf("looking for run %s: %w", RunLocation(root, run), err)
		}
		return ok, nil
	}
	dir, err := runDir(root, run)
	if err != nil {
		return false, err
	}
	return isLocalRun(dir), nil
}

// isLocalRun reports whether dir holds a progress file (a regular file:
// the readers refuse a link).
func isLocalRun(dir string) bool {
	fi, err := os.Lstat(filepath.Join(dir, ProgressFile))
	return err == nil && fi.Mode().IsRegular()
}

// SplitRunPath splits a storage path that names one run into the
// storage path above it and the run's name: "s3://b/runs/r" gives
// "s3://b/runs" and "r", "./results/r" gives "results" and "r". ok is
// false when there is nothing above (a bucket, a file system's root).
func SplitRunPath(path string) (root, run string, ok bool) {
	if IsObjectPath(path) {
		trimmed := strings.TrimRight(path, "/")
		i := strings.LastIndexByte(trimmed, '/')
		if i < 0 || strings.HasSuffix(trimmed[:i+1], "://") || checkRunName(trimmed[i+1:]) != nil {
			return "", "", false
		}
		return trimmed[:i], trimmed[i+1:], true
	}
	dir, err := localRoot(path)
	if err != nil {
		return "", "", false
	}
	root, run = filepath.Dir(dir), filepath.Base(dir)
	if root == dir || checkRunName(run) != nil {
		return "", "", false
	}
	return root, run, true
}
