package storage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// ManifestFile is the manifest inside a checkpoint directory: what the
// checkpoint is (the report committed with it) and every file it holds,
// with its size and SHA-256. Commit writes it last into the staged
// directory, before the rename that makes the checkpoint visible, so a
// checkpoint exists if and only if its manifest does; restore checks the
// files against it. The name is reserved at the top of a checkpoint.
//
// On the wire it is a JSON object:
//
//	{"format_version":1,"step":12,"time":"2026-12-02T15:04:05Z","metrics":{"loss":0.25},
//	 "generation":2,"attempt":1,
//	 "files":[{"path":"model.bin","size":4096,"sha256":"9f86d0…"}]}
//
// Paths are relative to the checkpoint directory, separated by "/", sorted
// and unique; the manifest does not list itself. The same document serves
// an object store, where a checkpoint's files are objects under a prefix.
const ManifestFile = "MANIFEST.json"

// manifestVersion is the format this package writes and reads.
const manifestVersion = 1

// maxManifestSize bounds a manifest read from storage.
const maxManifestSize = 16 << 20

// FileSum is one file of a checkpoint.
type FileSum struct {
	// Path is relative to the checkpoint directory, "/"-separated.
	Path string `json:"path"`
	// Size is the file's length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the file's SHA-256 in lowercase hex; "" in a listing
	// whose files were not hashed (see Manifest.Check).
	SHA256 string `json:"sha256"`
	// Inline marks, on an object store, a file whose bytes follow the
	// manifest inside its object instead of being an object of their own
	// (see planInline).
	Inline bool `json:"inline,omitempty"`
}

// Manifest is the decoded ManifestFile of a checkpoint.
type Manifest struct {
	// Record is the report committed with the checkpoint; its Checkpoint
	// field is empty (the directory's name says which checkpoint it is).
	Record Record
	// Files are the checkpoint's files, sorted by Path.
	Files []FileSum
}

// wireManifest is Manifest as it is written; pointers mark required fields.
type wireManifest struct {
	Version    *int           `json:"format_version"`
	Step       *int64         `json:"step"`
	Time       *time.Time     `json:"time"`
	Metrics    map[string]any `json:"metrics"`
	Generation uint64         `json:"generation"`
	Attempt    int            `json:"attempt"`
	TimeTotal  float64        `json:"time_total_s,omitempty"`
	Files      []FileSum      `json:"files"`
}

// EncodeManifest renders m, sorting its files. It fails on a file entry
// DecodeManifest would refuse.
func EncodeManifest(m Manifest) ([]byte, error) {
	files := slices.Clone(m.Files)
	slices.SortFunc(files, func(a, b FileSum) int { return strings.Compare(a.Path, b.Path) })
	if err := checkFileSums(files); err != nil {
		return nil, fmt.Errorf("encoding manifest: %w", err)
	}
	v := manifestVersion
	w := wireManifest{
		Version: &v, Step: &m.Record.Step, Time: &m.Record.Time, Metrics: m.Record.Metrics,
		Generation: m.Record.Generation, Attempt: m.Record.Attempt, TimeTotal: m.Record.TimeTotal.Seconds(), Files: files,
	}
	if w.Metrics == nil {
		w.Metrics = map[string]any{}
	}
	if w.Files == nil {
		w.Files = []FileSum{}
	}
	b, err := json.MarshalIndent(w, "", " ")
	if err != nil {
		return nil, fmt.Errorf("encoding manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// DecodeManifest parses a manifest and checks it is well formed: a known
// format version, a step and a time, and file entries with clean relative
// paths in sorted order, no duplicates, sizes of zero or more and SHA-256
// sums in lowercase hex.
func DecodeManifest(b []byte) (Manifest, error) {
	if len(b) > maxManifestSize {
		return Manifest{}, fmt.Errorf("manifest is %d bytes, more than %d", len(b), maxManifestSize)
	}
	var w wireManifest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&w); err != nil {
		return Manifest{}, fmt.Errorf("decoding manifest: %w", err)
	}
	if _, err := dec.Token(); err == nil {
		return Manifest{}, errors.New("decoding manifest: data after the object")
	}
	switch {
	case w.Version == nil:
		return Manifest{}, errors.New(`manifest has no "format_version"`)
	case *w.Version != manifestVersion:
		return Manifest{}, fmt.Errorf("manifest format_version %d is not supported (want %d)", *w.Version, manifestVersion)
	case w.Step == nil:
		return Manifest{}, errors.New(`manifest has no "step"`)
	case w.Time == nil:
		return Manifest{}, errors.New(`manifest has no "time"`)
	}
	if err := checkFileSums(w.Files); err != nil {
		return Manifest{}, err
	}
	return Manifest{
		Record: Record{Step: *w.Step, Time: *w.Time, Metrics: w.Metrics, Generation: w.Generation, Attempt: w.Attempt,
			TimeTotal: duration(w.TimeTotal)},
		Files: w.Files,
	}, nil
}

// checkFileSums checks sorted file entries.
func checkFileSums(files []FileSum) error {
	for i, f := range files {
		if err := checkManifestPath(f.Path); err != nil {
			return err
		}
		if i > 0 && files[i-1].Path >= f.Path {
			return fmt.Errorf("manifest files not sorted or repeated at %q", f.Path)
		}
		if f.Size < 0 {
			return fmt.Errorf("manifest file %q has size %d", f.Path, f.Size)
		}
		if !isSHA256Hex(f.SHA256) {
			return fmt.Errorf("manifest file %q has sha256 %q, want 64 lowercase hex digits", f.Path, f.SHA256)
		}
	}
	return nil
}

// checkManifestPath accepts a clean relative "/"-separated path that stays
// inside the checkpoint and is not the manifest itself.
func checkManifestPath(p string) error {
	switch {
	case p == "" || p == "." || path.Clean(p) != p:
		return fmt.Errorf("manifest path %q is not clean", p)
	case path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("manifest path %q leaves the checkpoint", p)
	case strings.ContainsAny(p, "\\\x00"):
		return fmt.Errorf("manifest path %q holds a backslash or NUL", p)
	case p == ManifestFile:
		return fmt.Errorf("manifest lists itself")
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ErrCorruptCheckpoint is wrapped by the error of a checkpoint whose files
// do not match its manifest, or whose manifest is unreadable.
var ErrCorruptCheckpoint = errors.New("checkpoint is corrupt")

// CheckpointError says what is wrong with a checkpoint.
type CheckpointError struct {
	// Name is the checkpoint directory's name.
	Name string
	// Problems are the differences found, one phrase each.
	Problems []string
}

// Error implements error.
func (e *CheckpointError) Error() string {
	return fmt.Sprintf("%s: %v: %s", e.Name, ErrCorruptCheckpoint, strings.Join(e.Problems, "; "))
}

// Unwrap makes the error match ErrCorruptCheckpoint.
func (e *CheckpointError) Unwrap() error { return ErrCorruptCheckpoint }

// maxProblems bounds the problems Check lists.
const maxProblems = 8

// Check compares the files found in a checkpoint with the manifest and
// returns one phrase per difference (at most a few): a file missing, one
// the manifest does not list, a size or a SHA-256 that differs. A found
// entry with an empty SHA256 was not hashed; only its size is compared.
func (m Manifest) Check(found []FileSum) []string {
	want := make(map[string]FileSum, len(m.Files))
	for _, f := range m.Files {
		want[f.Path] = f
	}
	var problems []string
	add := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	seen := make(map[string]bool, len(found))
	for _, f := range found {
		seen[f.Path] = true
		w, ok := want[f.Path]
		switch {
		case !ok:
			add("%s is not in the manifest", f.Path)
		case f.Size != w.Size:
			add("%s is %d bytes, the manifest says %d", f.Path, f.Size, w.Size)
		case f.SHA256 != "" && f.SHA256 != w.SHA256:
			add("%s has sha256 %s, the manifest says %s", f.Path, f.SHA256, w.SHA256)
		}
	}
	for _, f := range m.Files {
		if !seen[f.Path] {
			add("%s is missing", f.Path)
		}
	}
	return problems
}
