//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package storage

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// The sweep removes the node caches that no process uses and none has
// used for the idle time, whether they have an in-use file or predate
// it, and nothing else: not a cache in use however old its mark, not one
// used lately, not another directory or file of the same age.
func TestSweepNodeCaches(t *testing.T) {
	base := t.TempDir()
	const root = "s3://bucket/runs"
	old := time.Now().Add(-NodeCacheIdle - time.Hour)
	age := func(p string, at time.Time) { must.NoError(t, os.Chtimes(p, at, at)) }
	open := func(run string) *NodeCache {
		c, err := OpenNodeCache(base, root, run)
		must.NoError(t, err)
		must.NoError(t, os.WriteFile(filepath.Join(c.Dir, "checkpoint_000001"), []byte("w"), 0o644))
		return c
	}
	// In use for long: its mark is old, its lock held.
	busy := open("busy")
	defer busy.Close()
	age(filepath.Join(busy.Dir, InUseFile), old)
	// Released long ago, and lately.
	gone := open("gone")
	must.NoError(t, gone.Close())
	age(filepath.Join(gone.Dir, InUseFile), old)
	recent := open("recent")
	must.NoError(t, recent.Close())
	// Made before caches had in-use files, long ago and lately.
	legacy := NodeCacheDir(base, root, "legacy")
	must.NoError(t, os.MkdirAll(filepath.Join(legacy, "checkpoint_000003"), 0o755))
	age(legacy, old)
	fresh := NodeCacheDir(base, root, "fresh")
	must.NoError(t, os.MkdirAll(fresh, 0o755))
	// Not caches.
	other := filepath.Join(base, "notes")
	must.NoError(t, os.Mkdir(other, 0o755))
	age(other, old)
	file := filepath.Join(base, "x-0123456789ab")
	must.NoError(t, os.WriteFile(file, nil, 0o644))
	age(file, old)

	removed, err := SweepNodeCaches(base, time.Now(), NodeCacheIdle)
	must.NoError(t, err)
	slices.Sort(removed)
	must.Eq(t, []string{filepath.Base(gone.Dir), filepath.Base(legacy)}, removed)
	for _, p := range []string{busy.Dir, recent.Dir, fresh, other, file} {
		_, err := os.Lstat(p)
		must.NoError(t, err, must.Sprintf("%s is kept", p))
	}
	for _, p := range []string{gone.Dir, legacy} {
		_, err := os.Lstat(p)
		must.ErrorIs(t, err, os.ErrNotExist, must.Sprintf("%s is removed", p))
	}

	// Released, the cache in use ages like any other: its Close marks
	// the last use.
	must.NoError(t, busy.Close())
	removed, err = SweepNodeCaches(base, time.Now(), NodeCacheIdle)
	must.NoError(t, err)
	must.SliceEmpty(t, removed)
	removed, err = SweepNodeCaches(base, time.Now().Add(NodeCacheIdle), NodeCacheIdle)
	must.NoError(t, err)
	must.SliceContains(t, removed, filepath.Base(busy.Dir))
}

// A process that opens a cache while a sweep removes it waits for the
// sweep, then has the cache made anew and marked in use by its own lock.
func TestOpenNodeCacheAfterSweep(t *testing.T) {
	base, c := usedCache(t)
	// The sweep's part: the exclusive lock, held while the cache goes.
	sweep, err := os.OpenFile(filepath.Join(c.Dir, InUseFile), os.O_RDWR, 0)
	must.NoError(t, err)
	must.True(t, tryLockExclusive(sweep))
	opened := make(chan *NodeCache)
	go func() {
		c, err := OpenNodeCache(base, cacheRoot, "r")
		if err != nil {
			t.Error(err)
		}
		opened <- c
	}()
	select {
	case <-opened:
		t.Fatal("the cache was opened while the sweep held it")
	case <-time.After(100 * time.Millisecond):
	}
	must.NoError(t, os.RemoveAll(c.Dir))
	must.NoError(t, sweep.Close())
	again := <-opened
	must.NotNil(t, again)
	defer again.Close()
	must.True(t, sameFile(again.lock, filepath.Join(again.Dir, InUseFile)))
	// Its lock is a live one: a sweep cannot take the cache.
	f, err := os.Open(filepath.Join(again.Dir, InUseFile))
	must.NoError(t, err)
	defer f.Close()
	must.ErrorIs(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK)
}

// Two sweeps of one machine (two runs starting) may both find a cache
// idle; the one that gets its lock second finds it removed, and made
// anew by a process that used it since, and leaves that alone.
func TestSweepLeavesACacheMadeAnew(t *testing.T) {
	base, c := usedCache(t)
	marker := filepath.Join(c.Dir, InUseFile)
	old := time.Now().Add(-2 * NodeCacheIdle)
	must.NoError(t, os.Chtimes(marker, old, old))
	// The second sweep has opened the idle cache's mark...
	late, fi, err := idleMark(c.Dir, time.Now(), NodeCacheIdle)
	must.NoError(t, err)
	must.NotNil(t, late)
	defer late.Close()
	// ...when the first removes the cache, and a run makes it anew.
	must.NoError(t, os.RemoveAll(c.Dir))
	again, err := OpenNodeCache(base, cacheRoot, "r")
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(again.Dir, "checkpoint_000001"), []byte("w"), 0o644))
	must.NoError(t, again.Close())
	removed, err := removeUnused(c.Dir, late, fi)
	must.NoError(t, err)
	must.False(t, removed)
	must.FileExists(t, filepath.Join(again.Dir, "checkpoint_000001"))
}

// cacheRoot is the storage path of the caches usedCache makes.
const cacheRoot = "s3://bucket/runs"

// usedCache makes run "r"'s node cache in a fresh base, used and released.
func usedCache(t *testing.T) (string, *NodeCache) {
	t.Helper()
	base := t.TempDir()
	c, err := OpenNodeCache(base, cacheRoot, "r")
	must.NoError(t, err)
	must.NoError(t, c.Close())
	return base, c
}
