package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Where the runs are: the storage path the dashboard was given, and the
// keys pages name runs and experiments by, resolved under it.

// errBadKey is returned for a run or experiment key that names no
// directory under the root.
var errBadKey = errors.New("not a run or experiment under the storage path")

// setRoot takes the storage path to show: a directory or an object store,
// or a run's own path, whose storage path is then shown with the run
// among the others. An object store is asked once here, so that a wrong
// bucket or missing credentials fail at once rather than show nothing.
func (s *Server) setRoot(ctx context.Context, root string, o workerenv.StorageOptions) error {
	if storage.IsObjectPath(root) {
		s.root, s.remote = strings.TrimRight(root, "/"), true
		s.opts = []storage.Option{storage.WithStorageOptions(o)}
		if parent, name, ok := storage.SplitRunPath(s.root); ok {
			isRun, err := storage.IsRun(ctx, parent, name, s.opts...)
			if err != nil {
				return err
			}
			if isRun {
				s.root = parent
			}
			return nil
		}
		_, err := storage.ListRuns(ctx, s.root, s.opts...)
		return err
	}
	dir, err := storage.LocalDir(root)
	if err != nil {
		return err
	}
	// A storage path no run has written to yet lists no runs until one does.
	fi, err := os.Stat(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading storage path: %w", err)
	}
	if err == nil && !fi.IsDir() {
		return fmt.Errorf("storage path %s is not a directory", dir)
	}
	if parent, name, ok := storage.SplitRunPath(dir); ok {
		if isRun, _ := storage.IsRun(ctx, parent, name); isRun {
			dir = parent
		}
	}
	s.root = dir
	return nil
}

// checkKey accepts a key, a slash-separated path under the root, that
// stays under it and names no scratch (dot) entry.
func checkKey(key string) error {
	clean := path.Clean(key)
	if key == "" || clean != key || !filepath.IsLocal(filepath.FromSlash(key)) || strings.Contains(key, `\`) {
		return fmt.Errorf("%w: %q", errBadKey, key)
	}
	for _, part := range strings.Split(key, "/") {
		if strings.HasPrefix(part, ".") {
			return fmt.Errorf("%w: %q", errBadKey, key)
		}
	}
	return nil
}

// localDir resolves a key ("." for the root itself) to its directory
// under a local root, refusing one that leaves the root.
func (s *Server) localDir(key string) (string, error) {
	if s.root == "" || s.remote {
		return "", fmt.Errorf("%w: no local storage path was given", errBadKey)
	}
	if key == "." {
		return s.root, nil
	}
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

// runAt resolves a run's key to the storage path it is kept under and
// its name, on either backend.
func (s *Server) runAt(key string) (root, name string, err error) {
	if !s.remote {
		dir, err := s.localDir(key)
		if err != nil {
			return "", "", err
		}
		return filepath.Dir(dir), filepath.Base(dir), nil
	}
	if err := checkKey(key); err != nil {
		return "", "", err
	}
	full := s.root + "/" + key
	i := strings.LastIndexByte(full, '/')
	return full[:i], full[i+1:], nil
}

// isExperiment reports whether where holds an experiment's state.
func (s *Server) isExperiment(ctx context.Context, where string) bool {
	ok, err := storage.IsExperiment(ctx, where, s.opts...)
	return err == nil && ok
}

// experimentAt resolves an experiment's key ("." for the root itself) to
// its place, on either backend, or errBadKey when no experiment is there.
func (s *Server) experimentAt(ctx context.Context, key string) (string, error) {
	var where string
	switch {
	case !s.remote:
		dir, err := s.localDir(key)
		if err != nil {
			return "", err
		}
		where = dir
	case key == ".":
		where = s.root
	default:
		if err := checkKey(key); err != nil {
			return "", err
		}
		where = s.root + "/" + key
	}
	if !s.isExperiment(ctx, where) {
		return "", fmt.Errorf("%w: %q", errBadKey, key)
	}
	return where, nil
}
