package storage

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// syncPath flushes a file's data and size, or a directory's entries
// (creations, renames, removals).
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening to sync: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	return nil
}

// syncDir flushes a directory's entries.
func syncDir(dir string) error { return syncPath(dir) }

// syncParallel bounds the fsync calls syncTree keeps in flight.
const syncParallel = 8

// syncTree flushes every regular file and every directory under root, root
// included, several at a time: fsyncs of different files proceed together
// (ext4 and XFS fold them into one journal commit; NFS sends them in
// parallel), so a checkpoint of many files costs about one round trip, not
// one per file. Symbolic links are entries of their directory and are
// flushed with it.
func syncTree(root string) error {
	var paths []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walking %s: %w", path, err)
		}
		if d.IsDir() || d.Type().IsRegular() {
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return syncAll(paths)
}

// placeDir makes dst hold src's entries and removes src: one rename when
// dst does not exist (or is empty), else src's entries moved into it
// (moveInto), which refuses to replace any.
func placeDir(src, dst string) error {
	if err := os.Rename(src, dst); err == nil {
		return nil
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := moveInto(src, dst); err != nil {
		return err
	}
	return os.Remove(src)
}

// moveInto moves the entries of src into dst, merging directories that
// exist on both sides. An entry is renamed when src and dst share a
// filesystem and copied then removed otherwise. A file or link that
// already exists in dst is ErrExists. src itself is left in place, empty.
func moveInto(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("reading %s: %w", src, err)
	}
	for _, e := range entries {
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		dfi, err := os.Lstat(d)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := moveEntry(s, d); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("checking %s: %w", d, err)
		case dfi.IsDir() && e.IsDir():
			if err := moveInto(s, d); err != nil {
				return err
			}
			if err := os.Remove(s); err != nil {
				return fmt.Errorf("removing moved directory: %w", err)
			}
		default:
			return fmt.Errorf("%w: %s", ErrExists, d)
		}
	}
	return nil
}

// moveEntry renames s to d, falling back to copy and remove across
// filesystems.
func moveEntry(s, d string) error {
	err := os.Rename(s, d)
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.EXDEV) {
		return fmt.Errorf("moving %s: %w", s, err)
	}
	if err := copyTree(s, d); err != nil {
		return err
	}
	if err := os.RemoveAll(s); err != nil {
		return fmt.Errorf("removing copied source: %w", err)
	}
	return nil
}

// copyTree copies a regular file, a symbolic link or a directory tree from
// s to d, keeping permission bits. Other kinds of files are an error.
func copyTree(s, d string) error {
	return filepath.WalkDir(s, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walking %s: %w", path, err)
		}
		rel, err := filepath.Rel(s, path)
		if err != nil {
			return fmt.Errorf("relative path of %s: %w", path, err)
		}
		target := filepath.Join(d, rel)
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("stat %s: %w", path, err)
		}
		switch {
		case e.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()|0o700); err != nil {
				return fmt.Errorf("creating directory: %w", err)
			}
		case e.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return fmt.Errorf("reading link: %w", err)
			}
			if err := os.Symlink(link, target); err != nil {
				return fmt.Errorf("copying link: %w", err)
			}
		case e.Type().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		default:
			return fmt.Errorf("cannot copy %s: unsupported file type %v", path, e.Type())
		}
		return nil
	})
}

// copyFile copies one regular file; the data is flushed later by syncTree.
func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("opening copy source: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("creating copy: %w", err)
	}
	err = copyContents(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return nil
}

// scratchName is a fresh name for a scratch entry: prefix + base + random.
func scratchName(prefix, base string) string {
	return prefix + base + "-" + rand.Text()
}

// writeFileAtomic writes b as dir/name through a temporary file renamed
// over it, so that readers see all of b or what was there before.
func writeFileAtomic(dir, name string, b []byte) error {
	return writeFileThrough(dir, name, b, false)
}

// writeFileDurable is writeFileAtomic that also flushes the file before
// the rename and the directory after it, so that a crash leaves the old
// contents or the new, never an empty file.
func writeFileDurable(dir, name string, b []byte) error {
	return writeFileThrough(dir, name, b, true)
}

func writeFileThrough(dir, name string, b []byte, durable bool) error {
	tmp, err := os.CreateTemp(dir, ".tmp-"+name+"-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil && durable {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if durable {
		return syncDir(dir)
	}
	return nil
}
