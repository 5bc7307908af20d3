package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// listTree lists the regular files under root (the root's manifest left
// out) with their sizes, unhashed. Anything else that is not a directory
// (a symbolic link, a device) is a problem, as are unreadable entries.
func listTree(root string) (files []FileSum, problems []string, err error) {
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walking %s: %w", p, err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return fmt.Errorf("relative path of %s: %w", p, err)
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() || rel == ManifestFile:
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return fmt.Errorf("stat %s: %w", p, err)
			}
			files = append(files, FileSum{Path: rel, Size: fi.Size()})
		default:
			problems = append(problems, fmt.Sprintf("%s is a %v, not a regular file", rel, d.Type()))
		}
		return nil
	})
	return files, problems, err
}

// sumParallel bounds the files hashed at once.
const sumParallel = syncParallel

// sumFiles hashes the listed files under root, several at a time.
func sumFiles(root string, files []FileSum) ([]FileSum, error) {
	out := slices.Clone(files)
	errs := make([]error, len(out))
	sem := make(chan struct{}, sumParallel)
	var wg sync.WaitGroup
	for i := range out {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i], errs[i] = sumFile(filepath.Join(root, filepath.FromSlash(out[i].Path)), out[i].Path)
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// sumFile hashes one regular file.
func sumFile(p, rel string) (FileSum, error) {
	f, err := os.Open(p)
	if err != nil {
		return FileSum{}, fmt.Errorf("opening %s: %w", rel, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, make([]byte, 256<<10))
	if err != nil {
		return FileSum{}, fmt.Errorf("hashing %s: %w", rel, err)
	}
	return FileSum{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// listDirs lists every directory under root except root itself.
func listDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walking %s: %w", p, err)
		}
		if d.IsDir() && p != root {
			dirs = append(dirs, p)
		}
		return nil
	})
	return dirs, err
}

// sealStaged makes a staged checkpoint durable with its manifest. The
// files and sub-directories are flushed while the files are hashed (the
// hash reads the page cache; the flush waits on the disk); once hashed,
// the manifest for rec is written (replacing any file of that name at the
// top) and flushed with the staging directory while the first flushes may
// still be in flight. It returns when everything is flushed.
func sealStaged(dir string, rec Record) error {
	files, problems, err := listTree(dir)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("checkpoints hold regular files and directories only: %s", strings.Join(problems, "; "))
	}
	dirs, err := listDirs(dir)
	if err != nil {
		return err
	}
	paths := dirs
	for _, f := range files {
		paths = append(paths, filepath.Join(dir, filepath.FromSlash(f.Path)))
	}
	flushed := make(chan error, 1)
	go func() { flushed <- syncAll(paths) }()
	err = writeManifest(dir, rec, files)
	return errors.Join(err, <-flushed)
}

// writeManifest hashes the files, then writes the manifest and flushes it
// and dir.
func writeManifest(dir string, rec Record, files []FileSum) error {
	sums, err := sumFiles(dir, files)
	if err != nil {
		return err
	}
	rec.Checkpoint = ""
	b, err := EncodeManifest(Manifest{Record: rec, Files: sums})
	if err != nil {
		return err
	}
	p := filepath.Join(dir, ManifestFile)
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("replacing staged %s: %w", ManifestFile, err)
	}
	if err := writeFile(p, b); err != nil {
		return err
	}
	return syncAll([]string{p, dir})
}

// syncAll flushes the paths, several at a time.
func syncAll(paths []string) error {
	errs := make([]error, len(paths))
	sem := make(chan struct{}, syncParallel)
	var wg sync.WaitGroup
	for i, p := range paths {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = syncPath(p)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ReadManifest reads the manifest of the checkpoint in dir; ok is false
// when it has none (a checkpoint written before manifests existed).
func ReadManifest(dir string) (m Manifest, ok bool, err error) {
	m, _, ok, err = readManifestDoc(dir)
	return m, ok, err
}

// readManifestDoc is readManifest that also returns the manifest's bytes.
func readManifestDoc(dir string) (m Manifest, doc []byte, ok bool, err error) {
	p := filepath.Join(dir, ManifestFile)
	f, err := openRegular(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, nil, false, nil
	}
	if err != nil {
		return Manifest{}, nil, true, err
	}
	defer f.Close()
	doc, err = io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return Manifest{}, nil, true, fmt.Errorf("reading %s: %w", ManifestFile, err)
	}
	m, err = DecodeManifest(doc)
	return m, doc, true, err
}

// checkpointManifest reads the manifest of checkpoint name in dir, and
// its bytes; ok is false when there is none. One that is not a regular
// file or does not decode is a *CheckpointError; one this process may not
// read is returned as it is.
func checkpointManifest(dir, name string) (m Manifest, doc []byte, ok bool, err error) {
	m, doc, ok, err = readManifestDoc(dir)
	switch {
	case !ok || err == nil:
		return m, doc, ok, err
	case errors.Is(err, errNotRegular):
		err = &CheckpointError{Name: name, Problems: []string{err.Error()}}
	case !errors.Is(err, fs.ErrPermission):
		err = &CheckpointError{Name: name, Problems: []string{fmt.Sprintf("unreadable manifest: %v", err)}}
	}
	return m, doc, true, err
}

// checkListing lists the files of checkpoint name in dir and compares
// their names and sizes with its manifest m (a *CheckpointError when they
// differ, or when something there is not a regular file).
func checkListing(dir, name string, m Manifest) ([]FileSum, error) {
	files, problems, err := listTree(dir)
	if err != nil {
		return nil, err
	}
	if problems = append(problems, m.Check(files)...); len(problems) > 0 {
		return nil, &CheckpointError{Name: name, Problems: problems}
	}
	return files, nil
}

// verifyCheckpoint checks the checkpoint name under runDir against its
// manifest and against rec, the record that commits it: sizes first, then
// SHA-256. A mismatch is a *CheckpointError; an error reading the files is
// returned as it is (it may pass). legacy is true for a checkpoint without
// a manifest, which cannot be checked.
func verifyCheckpoint(runDir, name string, rec Record) (legacy bool, err error) {
	dir := filepath.Join(runDir, name)
	bad := func(problems ...string) error { return &CheckpointError{Name: name, Problems: problems} }
	m, _, ok, err := checkpointManifest(dir, name)
	switch {
	case !ok:
		return true, nil
	case err != nil:
		return false, err
	case m.Record.Step != rec.Step:
		return false, bad(fmt.Sprintf("manifest step %d, record step %d", m.Record.Step, rec.Step))
	}
	files, err := checkListing(dir, name, m)
	if err != nil {
		return false, err
	}
	sums, err := sumFiles(dir, files)
	if err != nil {
		return false, err
	}
	if problems := m.Check(sums); len(problems) > 0 {
		return false, bad(problems...)
	}
	return false, nil
}
