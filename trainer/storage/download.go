package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// downloadPrefix names the scratch directory DownloadCheckpoint fills
// beside its destination.
const downloadPrefix = ".nomad-train-download-"

// DownloadCheckpoint copies the committed checkpoint at location into
// dir, checking every file against the checkpoint's manifest, so that dir
// holds the checkpoint's files and its MANIFEST.json, as a checkpoint in a
// run directory does. location is where a Result names the checkpoint:
// s3://bucket/prefix/<run>/checkpoints/checkpoint_NNNNNN on an object store
// (whose small files live inside the manifest object, where other S3 tools
// cannot read them), or a checkpoint directory (a path or a file:// URI).
// On an object store WithObjectConfig (or WithStorageOptions) gives the
// non-secret options; credentials come from the AWS chain.
//
// dir must not exist, or be an empty directory. The copy is made in a
// scratch directory beside dir and renamed into place once every file
// matched, so dir appears whole or not at all; nothing is left behind on
// failure. A location without a committed checkpoint is ErrNoCheckpoint, a
// checkpoint whose files do not match its manifest a *CheckpointError.
func DownloadCheckpoint(ctx context.Context, location, dir string, opts ...Option) error {
	dir = filepath.Clean(dir)
	if err := checkDownloadTarget(dir); err != nil {
		return err
	}
	scratch := filepath.Join(filepath.Dir(dir), scratchName(downloadPrefix, filepath.Base(dir)))
	if err := os.Mkdir(scratch, 0o755); err != nil {
		return fmt.Errorf("downloading into %s: %w", dir, err)
	}
	defer os.RemoveAll(scratch)
	var err error
	if IsObjectPath(location) {
		err = downloadObject(ctx, location, scratch, opts)
	} else if src, lerr := LocalDir(location); lerr != nil {
		err = lerr
	} else {
		err = copyCheckpointDir(ctx, src, scratch, optionsOf(opts).progress)
	}
	if err != nil {
		return err
	}
	// rename(2) replaces an empty directory and fails on any other, so
	// files put in dir meanwhile are never replaced (os.Rename refuses
	// every existing directory).
	if err := syscall.Rename(scratch, dir); err != nil {
		return fmt.Errorf("placing the checkpoint at %s: %w", dir, err)
	}
	return nil
}

// checkDownloadTarget refuses a destination that exists and is not an
// empty directory.
func checkDownloadTarget(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s exists and is not a directory", dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.ReadDir(1); err != io.EOF {
		if err != nil {
			return fmt.Errorf("reading %s: %w", dir, err)
		}
		return fmt.Errorf("%s is not empty: download into a new or empty directory", dir)
	}
	return nil
}

// downloadObject downloads the checkpoint at an s3:// location into the
// empty directory into.
func downloadObject(ctx context.Context, location, into string, opts []Option) error {
	root, run, name, err := SplitCheckpointLocation(location)
	if err != nil {
		return err
	}
	st, err := objstore.Open(ctx, root, objectConfig(opts))
	if err != nil {
		return err
	}
	files := objFiles{ctx: ctx, st: st, run: run, progress: optionsOf(opts).progress}
	if err := files.download(name, into, nil); err != nil {
		return fmt.Errorf("downloading %s: %w", location, err)
	}
	return nil
}

// SplitCheckpointLocation splits the s3:// location of a checkpoint
// (s3://bucket/prefix/<run>/checkpoints/checkpoint_NNNNNN) into the
// storage path, the run's name and the checkpoint's name.
func SplitCheckpointLocation(location string) (root, run, name string, err error) {
	loc, err := objstore.ParseURL(location)
	if err != nil {
		return "", "", "", fmt.Errorf("%w: %w", ErrNotCheckpointLocation, err)
	}
	parts := strings.Split(loc.Prefix, "/")
	n := len(parts)
	if n < 3 || parts[n-2]+"/" != objCheckpointDir {
		return "", "", "", fmt.Errorf("%s is %w: want s3://bucket[/prefix]/<run>/%s%s<N>", location, ErrNotCheckpointLocation, objCheckpointDir, checkpointPrefix)
	}
	run, name = parts[n-3], parts[n-1]
	if _, ok := checkpointIndex(name); !ok {
		return "", "", "", fmt.Errorf("%s is %w: %q is not a checkpoint's name", location, ErrNotCheckpointLocation, name)
	}
	if err := checkRunName(run); err != nil {
		return "", "", "", fmt.Errorf("%s is %w: %w", location, ErrNotCheckpointLocation, err)
	}
	loc.Prefix = strings.Join(parts[:n-3], "/")
	return loc.String(), run, name, nil
}

// copyCheckpointDir copies the checkpoint directory src into the empty
// directory into: the files its manifest lists, each hashed as it is
// copied, then the manifest. A checkpoint that does not match its
// manifest, by its files' names and sizes before the copy or by their
// SHA-256 after it, is a *CheckpointError.
func copyCheckpointDir(ctx context.Context, src, into string, progress *Progress) error {
	name := filepath.Base(filepath.Clean(src))
	fi, err := os.Stat(src)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %w", ErrNoCheckpoint, err)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a checkpoint directory", src)
	}
	m, doc, ok, err := checkpointManifest(src, name)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s has no %s (not a checkpoint, or one written before manifests, which cannot be checked)", ErrNoCheckpoint, src, ManifestFile)
	case err != nil:
		return err
	}
	if _, err := checkListing(src, name, m); err != nil {
		return err
	}
	progress.start(m)
	sums := make([]FileSum, 0, len(m.Files))
	for _, f := range m.Files {
		if err := ctx.Err(); err != nil {
			return err
		}
		sum, err := copyCheckedFile(src, into, f.Path, progress)
		if err != nil {
			return err
		}
		sums = append(sums, sum)
	}
	return finishCopy(name, into, m, doc, sums)
}

// copyCheckedFile copies the regular file src/rel to into/rel, hashing it.
func copyCheckedFile(src, into, rel string, progress *Progress) (FileSum, error) {
	if err := checkManifestPath(rel); err != nil {
		return FileSum{}, err
	}
	f, err := openRegular(filepath.Join(src, filepath.FromSlash(rel)))
	if err != nil {
		return FileSum{}, fmt.Errorf("copying %s: %w", rel, err)
	}
	defer f.Close()
	return writeFileFrom(into, rel, progress.reader(f))
}

// startPrefix names the copy FetchStartCheckpoint makes of a checkpoint
// that a run starts from. It is no checkpoint's name, so a run's own
// checkpoints and their listings never include it.
const startPrefix = "start-"

// FetchStartCheckpoint makes a checked copy of the committed checkpoint at
// location (as DownloadCheckpoint takes it) in the directory local, once
// for every process that shares local: the first to ask downloads it while
// the others wait, under the lock a node's ranks take to fetch a run's own
// checkpoints. It returns the copy's directory and whether this call made
// it. It is how a run starts from a checkpoint it did not write (Ray's
// resume_from_checkpoint); local is a scratch directory of the run's, so
// the copy goes when the run next clears it.
func FetchStartCheckpoint(ctx context.Context, location, local string, opts ...Option) (string, bool, error) {
	unlock, err := lockFetch(local)
	if err != nil {
		return "", false, err
	}
	defer unlock()
	dir := filepath.Join(local, fmt.Sprintf("%s%x", startPrefix, sumOf(location)))
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err == nil {
		return dir, false, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", false, err
	}
	if err := DownloadCheckpoint(ctx, location, dir, opts...); err != nil {
		return "", false, err
	}
	return dir, true, nil
}
