package storage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// corruptions are ways a committed checkpoint goes bad on disk.
var corruptions = []struct {
	name string
	do   func(t *testing.T, dir string)
	says string // in the error
}{
	{"truncated model", func(t *testing.T, dir string) {
		must.NoError(t, os.Truncate(filepath.Join(dir, "model.bin"), 100))
	}, "model.bin is 100 bytes, the manifest says 4096"},
	{"flipped byte", func(t *testing.T, dir string) {
		p := filepath.Join(dir, "model.bin")
		b, err := os.ReadFile(p)
		must.NoError(t, err)
		b[1000] ^= 0x01
		must.NoError(t, os.WriteFile(p, b, 0o644))
	}, "model.bin has sha256"},
	{"edited meta", func(t *testing.T, dir string) {
		must.NoError(t, os.WriteFile(filepath.Join(dir, "meta.json"), []byte(`{"epoch":9}`), 0o644))
	}, "meta.json has sha256"},
	{"missing file", func(t *testing.T, dir string) {
		must.NoError(t, os.Remove(filepath.Join(dir, "meta.json")))
	}, "meta.json is missing"},
	{"extra file", func(t *testing.T, dir string) {
		must.NoError(t, os.WriteFile(filepath.Join(dir, "extra.bin"), []byte("x"), 0o644))
	}, "extra.bin is not in the manifest"},
	{"file replaced by a link", func(t *testing.T, dir string) {
		p := filepath.Join(dir, "meta.json")
		must.NoError(t, os.Remove(p))
		must.NoError(t, os.Symlink("/etc/hostname", p))
	}, "meta.json is a L"},
	{"garbled manifest", func(t *testing.T, dir string) {
		must.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"format_version":1,`), 0o644))
	}, "unreadable manifest"},
	{"manifest removed", func(t *testing.T, dir string) {
		must.NoError(t, os.Remove(filepath.Join(dir, ManifestFile)))
	}, "MANIFEST.json is missing (the older checkpoint_000001 has one)"},
}

// TestLatestFallsBackFromCorruptCheckpoint: a corrupt latest checkpoint
// used to be restored (and the training function's failure to load it
// marked the run failed for good), and an edited meta.json went unseen.
// Now each corruption is found, the newest intact checkpoint is restored,
// and the corrupt one is moved aside, never deleted.
func TestLatestFallsBackFromCorruptCheckpoint(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			dir := threeCheckpoints(t, root)
			bad := filepath.Join(dir, "checkpoint_000002")
			c.do(t, bad)
			before := readTree(t, bad)

			// A reader passes over it and moves nothing.
			ro, err := OpenReadOnly(root, "r", Policy{})
			must.NoError(t, err)
			name, _, ok, err := ro.Latest()
			must.NoError(t, err)
			must.True(t, ok)
			must.Eq(t, "checkpoint_000001", name)
			must.DirExists(t, bad)

			var logs strings.Builder
			r, err := Open(root, "r", Policy{}, WithLogger(hclog.New(&hclog.LoggerOptions{Output: &logs})))
			must.NoError(t, err)
			defer r.Close()
			res, err := r.LatestIntact()
			must.NoError(t, err)
			must.True(t, res.OK)
			must.Eq(t, "checkpoint_000001", res.Name)
			must.Eq(t, int64(2), res.Record.Step)
			must.False(t, res.Unverified)
			must.Len(t, 1, res.Skipped)
			must.Eq(t, "checkpoint_000002", res.Skipped[0].Name)
			must.ErrorIs(t, res.Skipped[0].Err, ErrCorruptCheckpoint)
			must.ErrorContains(t, res.Skipped[0].Err, c.says)
			must.StrContains(t, logs.String(), "checkpoint is corrupt")
			must.StrContains(t, logs.String(), "checkpoint_000002")

			moved := bad + quarantineSuffix
			must.Eq(t, moved, res.Skipped[0].MovedTo)
			must.Eq(t, before, readTree(t, moved), must.Sprint("the corrupt checkpoint is kept as it was"))
			// Rolling back to the restored step drops its record but not
			// the directory, and its index is not reused.
			must.NoError(t, r.TruncateAfter(res.Record.Step))
			must.DirExists(t, moved)
			must.Eq(t, "checkpoint_000003", commitT(t, r, map[string]string{"model.bin": "new"}, Record{Step: 3}))
			must.NoError(t, r.Close())
			r2 := openT(t, root, Policy{NumToKeep: 1})
			must.DirExists(t, moved)
			must.Eq(t, "checkpoint_000004", commitT(t, r2, map[string]string{"model.bin": "newer"}, Record{Step: 4}))
		})
	}
}

// TestLatestFallsBackTwice: when the two newest are corrupt, the third is
// restored; when every one is, there is none (a fresh start, said so).
func TestLatestFallsBackTwice(t *testing.T) {
	root := t.TempDir()
	dir := threeCheckpoints(t, root)
	must.NoError(t, os.Truncate(filepath.Join(dir, "checkpoint_000002", "model.bin"), 0))
	must.NoError(t, os.Truncate(filepath.Join(dir, "checkpoint_000001", "model.bin"), 0))
	r := openT(t, root, Policy{})
	res, err := r.LatestIntact()
	must.NoError(t, err)
	must.Eq(t, "checkpoint_000000", res.Name)
	must.Len(t, 2, res.Skipped)
	must.NoError(t, os.Truncate(filepath.Join(dir, "checkpoint_000000", "model.bin"), 0))
	r.intact = map[string]bool{}
	res, err = r.LatestIntact()
	must.NoError(t, err)
	must.False(t, res.OK)
	must.Len(t, 1, res.Skipped)
}

// TestLatestLegacyCheckpoints: checkpoints written before manifests
// existed load, unverified, and the log says so once.
func TestLatestLegacyCheckpoints(t *testing.T) {
	root := t.TempDir()
	dir := threeCheckpoints(t, root)
	for _, n := range []string{"checkpoint_000000", "checkpoint_000001", "checkpoint_000002"} {
		must.NoError(t, os.Remove(filepath.Join(dir, n, ManifestFile)))
	}
	var logs strings.Builder
	r, err := Open(root, "r", Policy{}, WithLogger(hclog.New(&hclog.LoggerOptions{Output: &logs})))
	must.NoError(t, err)
	defer r.Close()
	for range 2 {
		res, err := r.LatestIntact()
		must.NoError(t, err)
		must.Eq(t, "checkpoint_000002", res.Name)
		must.True(t, res.Unverified)
		must.SliceEmpty(t, res.Skipped)
	}
	must.Eq(t, 1, strings.Count(logs.String(), "no manifest"))
}

// TestLatestReadErrorIsNotCorruption: a checkpoint that cannot be read
// (here, for want of permission) is an error, not a reason to give it up.
func TestLatestReadErrorIsNotCorruption(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads everything")
	}
	root := t.TempDir()
	dir := threeCheckpoints(t, root)
	p := filepath.Join(dir, "checkpoint_000002", "model.bin")
	must.NoError(t, os.Chmod(p, 0))
	defer os.Chmod(p, 0o644)
	r := openT(t, root, Policy{})
	_, err := r.LatestIntact()
	must.Error(t, err)
	must.False(t, errors.Is(err, ErrCorruptCheckpoint))
	must.DirExists(t, filepath.Join(dir, "checkpoint_000002"))
}

// TestManifestWrittenAtCommit: the manifest lists every staged file with
// its size and SHA-256, and the record it commits; a file of that name
// staged by the caller is replaced.
func TestManifestWrittenAtCommit(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	name := commitT(t, r, map[string]string{"model.bin": "test", "sub/x": "abc", ManifestFile: "stale"}, Record{Step: 5, Metrics: map[string]any{"loss": 0.5}})
	m, ok, err := ReadManifest(r.CheckpointPath(name))
	must.NoError(t, err)
	must.True(t, ok)
	must.Eq(t, []FileSum{{"model.bin", 4, sumA, false}, {"sub/x", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", false}}, m.Files)
	must.Eq(t, int64(5), m.Record.Step)
	must.Eq(t, map[string]any{"loss": 0.5}, m.Record.Metrics)
	must.True(t, m.Record.Time.Equal(t0))
}

// TestProgressFileRefusesNonRegular: progress.jsonl that is a link (to
// /dev/zero, which took a reader to 13 GB) or a FIFO is refused by readers
// and by the writer, at once.
func TestProgressFileRefusesNonRegular(t *testing.T) {
	cases := []struct {
		name string
		make func(t *testing.T, p string)
	}{
		{"link to /dev/zero", func(t *testing.T, p string) { must.NoError(t, os.Symlink("/dev/zero", p)) }},
		{"link to a file", func(t *testing.T, p string) {
			other := filepath.Join(t.TempDir(), "other.jsonl")
			must.NoError(t, os.WriteFile(other, []byte(`{"step":1,"time":"2026-12-02T15:00:00Z"}`+"\n"), 0o644))
			must.NoError(t, os.Symlink(other, p))
		}},
		{"fifo", func(t *testing.T, p string) { must.NoError(t, syscall.Mkfifo(p, 0o644)) }},
		{"directory", func(t *testing.T, p string) { must.NoError(t, os.Mkdir(p, 0o755)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "r")
			must.NoError(t, os.MkdirAll(dir, 0o755))
			p := filepath.Join(dir, ProgressFile)
			tc.make(t, p)
			_, err := ReadProgressFile(p)
			must.ErrorIs(t, err, errNotRegular)
			_, err = Open(root, "r", Policy{})
			must.ErrorIs(t, err, errNotRegular)
			ro, err := OpenReadOnly(root, "r", Policy{})
			must.NoError(t, err)
			_, err = ro.Records()
			must.ErrorIs(t, err, errNotRegular)
		})
	}
}

// TestStepsOutOfOrder: a file whose steps go back is refused with its
// name and line; the writer refuses to write one.
func TestStepsOutOfOrder(t *testing.T) {
	root := t.TempDir()
	r := openT(t, root, Policy{})
	must.NoError(t, r.Append(Record{Step: 5}))
	must.ErrorIs(t, r.Append(Record{Step: 4}), ErrInvalidRecord)
	s, err := r.Stage()
	must.NoError(t, err)
	_, err = r.Commit(s, Record{Step: 3})
	must.ErrorIs(t, err, ErrInvalidRecord)
	must.NoError(t, s.Abort())
	must.NoError(t, r.Append(Record{Step: 5}), must.Sprint("the same step again is in order"))
	must.NoError(t, r.Close())

	p := filepath.Join(root, "r", ProgressFile)
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	must.NoError(t, err)
	_, err = f.WriteString(`{"step":2,"time":"2026-12-02T15:00:00Z"}` + "\n")
	must.NoError(t, err)
	must.NoError(t, f.Close())
	_, err = Open(root, "r", Policy{})
	must.ErrorContains(t, err, p+":3:")
	must.ErrorContains(t, err, "step 2 comes after step 5")
	_, err = ReadProgressFile(p)
	must.ErrorContains(t, err, p+":3:")
}
