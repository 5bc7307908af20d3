package storage

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// placeDir renames a directory into place when nothing is there, merges
// it into a directory that holds other files, and never replaces one.
func TestPlaceDir(t *testing.T) {
	root := t.TempDir()
	src := func(files map[string]string) string {
		dir, err := os.MkdirTemp(root, "src-")
		must.NoError(t, err)
		writeTree(t, dir, files)
		return dir
	}
	gone := func(dir string) {
		_, err := os.Lstat(dir)
		must.True(t, os.IsNotExist(err), must.Sprintf("%s is still there: %v", dir, err))
	}

	dst := filepath.Join(root, "copy")
	a := src(map[string]string{"model.bin": "weights", "opt/state": "moments"})
	must.NoError(t, placeDir(a, dst))
	gone(a)
	must.Eq(t, map[string]string{"model.bin": "weights", "opt/state": "moments"}, readTree(t, dst))

	b := src(map[string]string{"rank1.bin": "other rank", "opt/more": "x"})
	must.NoError(t, placeDir(b, dst))
	gone(b)
	must.Eq(t, map[string]string{"model.bin": "weights", "opt/state": "moments", "rank1.bin": "other rank", "opt/more": "x"}, readTree(t, dst))

	c := src(map[string]string{"model.bin": "a different model"})
	must.ErrorIs(t, placeDir(c, dst), ErrExists)
	must.Eq(t, "weights", readTree(t, dst)["model.bin"])
	must.Eq(t, map[string]string{"model.bin": "a different model"}, readTree(t, c))
}

// A directory staged on one file system (a checkpoint in memory, tmpfs)
// and placed on another (the node's cache on disk) is copied whole: every
// byte of files big and empty, their permission bits, links and nested
// directories; then the source is gone. The big file's size is no
// multiple of a page.
func TestPlaceDirAcrossFileSystems(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "placedir-")
	if err != nil {
		t.Skipf("no /dev/shm here: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	dst := filepath.Join(t.TempDir(), "copy")
	var a, b syscall.Stat_t
	must.NoError(t, syscall.Stat(shm, &a))
	must.NoError(t, syscall.Stat(filepath.Dir(dst), &b))
	if a.Dev == b.Dev {
		t.Skip("/dev/shm and the test's temporary directory are one file system")
	}
	big := make([]byte, 3<<20+17)
	for i := range big {
		big[i] = byte(i * 7)
	}
	files := map[string]string{"model.bin": string(big), "empty": "", "opt/state": "moments"}
	writeTree(t, shm, files)
	must.NoError(t, os.Chmod(filepath.Join(shm, "opt/state"), 0o600))
	must.NoError(t, os.Symlink("../model.bin", filepath.Join(shm, "opt/link")))

	must.NoError(t, placeDir(shm, dst))
	_, err = os.Lstat(shm)
	must.True(t, os.IsNotExist(err), must.Sprintf("the staged directory is still there: %v", err))
	files["opt/link"] = files["model.bin"] // the link reads as what it names
	must.Eq(t, files, readTree(t, dst))
	link, err := os.Readlink(filepath.Join(dst, "opt/link"))
	must.NoError(t, err)
	must.EqOp(t, "../model.bin", link)
	fi, err := os.Stat(filepath.Join(dst, "opt/state"))
	must.NoError(t, err)
	must.EqOp(t, os.FileMode(0o600), fi.Mode().Perm())
}

// BenchmarkCopyAcrossFileSystems: the copy of a 64 MiB checkpoint file
// staged in memory (tmpfs) into the node's cache on disk, as placeDir
// makes it (copyContents), over the same copy through io.Copy (what Go's
// file-to-file copy does there), in turn in each iteration. Reported:
// the medians of the CPU time this process spent per copy, and their
// ratio (below 1: copyContents costs less).
func BenchmarkCopyAcrossFileSystems(b *testing.B) {
	shm, err := os.MkdirTemp("/dev/shm", "copybench-")
	if err != nil {
		b.Skipf("no /dev/shm here: %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(shm) })
	src := filepath.Join(shm, "model.bin")
	if err := os.WriteFile(src, make([]byte, 64<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	dst := filepath.Join(b.TempDir(), "model.bin")
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	// copyWith returns the CPU time of one copy, in milliseconds.
	copyWith := func(cp func(out, in *os.File) error) float64 {
		in, err := os.Open(src)
		if err != nil {
			b.Fatal(err)
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			b.Fatal(err)
		}
		start := cpu()
		err = cp(out, in)
		used := cpu() - start
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Remove(dst)
		}
		if err != nil {
			b.Fatal(err)
		}
		return float64(used.Microseconds()) / 1000
	}
	ioCopy := func(out, in *os.File) error { _, err := io.Copy(out, in); return err }
	var ours, ref []float64
	for i := 0; i < b.N; i++ {
		ours = append(ours, copyWith(copyContents))
		ref = append(ref, copyWith(ioCopy))
	}
	o, r := median(ours), median(ref)
	b.ReportMetric(o, "cpu-ms/copy")
	b.ReportMetric(r, "io.Copy-cpu-ms/copy")
	b.ReportMetric(o/r, "copy/io.Copy")
}
