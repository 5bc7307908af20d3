package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// A run on an object store keeps copies of its checkpoints in a node
// cache (NodeCacheDir), which the ranks of one machine share and which
// outlives them: a restart on the same node restores without a download.
// Nothing else removes it when the run is over, and a cluster runs many
// (every trial of an experiment is a run), so the caches of one user on
// a machine are swept: a cache that no process uses and that none has used
// for NodeCacheIdle is removed by the next rank that opens a cache there.
// The directories a node stages checkpoints in memory in are swept the
// same way.
//
// A process marks the cache it uses with a shared flock(2) on the cache's
// in-use file, held until NodeCache.Close or its exit, and sets the file's
// time as it opens and closes it. The sweep takes the exclusive lock
// without waiting, so it never removes a cache in use, and removes the
// cache while it holds the lock. A process that opens a cache while the
// sweep removes it waits on the lock, finds its file gone, and makes the
// cache anew. On a platform without flock(2) nothing is swept.

// NodeCacheIdle is how long a node cache goes unused before it is swept.
// Sweeping one costs a run that comes back to the node later a download.
const NodeCacheIdle = 24 * time.Hour

// InUseFile is the file in a node cache whose lock marks it in use and
// whose modification time is its last use.
const InUseFile = ".in-use"

// nodeCacheName matches the names NodeCacheDir gives: the run's name, a
// dash, 12 hex digits.
var nodeCacheName = regexp.MustCompile(`^[A-Za-z0-9._-]+-[0-9a-f]{12}$`)

// NodeCache is one process's use of a node cache (or of another
// directory UseNodeDir marks).
type NodeCache struct {
	Dir  string
	lock *os.File
}

// OpenNodeCache makes the node cache of run (at root) in dir, a directory
// only this user can write to, and marks it in use until Close.
func OpenNodeCache(dir, root, run string) (*NodeCache, error) {
	return UseNodeDir(NodeCacheDir(dir, root, run))
}

// UseNodeDir makes the directory path, named as NodeCacheDir names them
// (a node cache, or a run's memory staging directory), and marks it in use
// until Close, so that SweepNodeCaches leaves it alone.
func UseNodeDir(path string) (*NodeCache, error) {
	for range 5 {
		if err := os.MkdirAll(path, 0o755); err != nil {
			return nil, fmt.Errorf("node cache: %w", err)
		}
		f, err := lockShared(filepath.Join(path, InUseFile))
		if err != nil {
			return nil, fmt.Errorf("node cache: %w", err)
		}
		if sameFile(f, filepath.Join(path, InUseFile)) {
			touch(f.Name())
			return &NodeCache{Dir: path, lock: f}, nil
		}
		f.Close() // swept while this waited for the lock: make it anew
	}
	return nil, fmt.Errorf("node cache %s: removed by a sweep each time it was made", path)
}

// Close marks the cache's last use and releases it.
func (c *NodeCache) Close() error {
	if c == nil || c.lock == nil {
		return nil
	}
	touch(c.lock.Name())
	err := c.lock.Close()
	c.lock = nil
	return err
}

// SweepNodeCaches removes the node caches in dir (NodeCacheDir's names;
// nothing else there is touched) that no process uses and that none has
// used for idle, and returns their names. A cache made before caches had
// an in-use file counts as used when its directory last changed.
func SweepNodeCaches(dir string, now time.Time, idle time.Duration) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sweeping node caches: %w", err)
	}
	var removed []string
	for _, e := range entries {
		if !e.IsDir() || !nodeCacheName.MatchString(e.Name()) {
			continue
		}
		ok, err := sweepNodeCache(filepath.Join(dir, e.Name()), now, idle)
		if err != nil {
			return removed, fmt.Errorf("sweeping node cache %s: %w", e.Name(), err)
		}
		if ok {
			removed = append(removed, e.Name())
		}
	}
	return removed, nil
}

// sweepNodeCache removes the cache at path if it is idle and unused.
func sweepNodeCache(path string, now time.Time, idle time.Duration) (bool, error) {
	f, fi, err := idleMark(path, now, idle)
	if f == nil || err != nil {
		return false, err
	}
	defer f.Close()
	return removeUnused(path, f, fi)
}

// idleMark opens the in-use file of the cache at path if the cache has
// been idle for idle (nil if not), and returns what it knew of the file
// before opening it (nil when there was none, and idleMark made it).
func idleMark(path string, now time.Time, idle time.Duration) (*os.File, fs.FileInfo, error) {
	idleSince := func(fi fs.FileInfo) bool { return now.Sub(fi.ModTime()) >= idle }
	marker := filepath.Join(path, InUseFile)
	fi, err := os.Lstat(marker)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No process has marked it: idle since the directory last changed.
		dfi, err := os.Lstat(path)
		if err != nil || !idleSince(dfi) {
			return nil, nil, nil
		}
		f, err := os.OpenFile(marker, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, nil, nil // made meanwhile: looked at again next time
		}
		return f, nil, nil
	case err != nil:
		return nil, nil, err
	case !fi.Mode().IsRegular() || !idleSince(fi):
		return nil, nil, nil
	}
	f, err := os.OpenFile(marker, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, nil
	}
	return f, fi, nil
}

// removeUnused removes the cache at path, whose in-use file idleMark
// opened as f (seen as fi), if no process uses it: under the exclusive
// lock, while the file is still the one at path and unchanged since.
func removeUnused(path string, f *os.File, fi fs.FileInfo) (bool, error) {
	if !tryLockExclusive(f) {
		return false, nil // in use
	}
	// Removed by another sweep before this one got the lock (and maybe
	// made anew since by a process that uses it): not this sweep's.
	if !sameFile(f, filepath.Join(path, InUseFile)) {
		return false, nil
	}
	// Used and released between the Lstat and the lock: not idle.
	if cur, err := f.Stat(); err != nil || (fi != nil && !cur.ModTime().Equal(fi.ModTime())) {
		return false, nil
	}
	if err := os.RemoveAll(path); err != nil {
		return false, err
	}
	return true, nil
}

// sameFile reports whether the open file f is still the file at path.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Lstat(path)
	return err == nil && os.SameFile(a, b)
}

// touch sets a file's times to now, on a best-effort basis.
func touch(path string) {
	now := time.Now()
	_ = os.Chtimes(path, now, now)
}
