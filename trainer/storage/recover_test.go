package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// threeCheckpoints commits checkpoints at steps 1, 2 and 3, each with a
// model and a meta.json naming its step, and closes the run.
func threeCheckpoints(t *testing.T, root string) string {
	t.Helper()
	r := openT(t, root, Policy{})
	for step := int64(1); step <= 3; step++ {
		must.NoError(t, r.Append(Record{Step: step, Metrics: map[string]any{"plain": true}}))
		commitT(t, r, map[string]string{
			"model.bin": strings.Repeat(string(rune('a'+step)), 4096),
			"meta.json": `{"epoch":` + string(rune('0'+step)) + `}`,
		}, Record{Step: step, Metrics: map[string]any{"epoch": float64(step)}})
	}
	must.NoError(t, r.Close())
	return filepath.Join(root, "r")
}

// TestOpenRebuildsRecordsFromManifests: a lost, emptied or cut
// progress.jsonl used to make Open delete every checkpoint and the run
// start again from scratch. Now the checkpoints keep their records, rebuilt
// from their manifests, and the run resumes from the latest.
func TestOpenRebuildsRecordsFromManifests(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(t *testing.T, progress string)
		rebuilt []string
		records int
	}{
		{"missing", func(t *testing.T, p string) { must.NoError(t, os.Remove(p)) },
			[]string{"checkpoint_000000", "checkpoint_000001", "checkpoint_000002"}, 3},
		{"empty", func(t *testing.T, p string) { must.NoError(t, os.Truncate(p, 0)) },
			[]string{"checkpoint_000000", "checkpoint_000001", "checkpoint_000002"}, 3},
		{"cut after two records", func(t *testing.T, p string) {
			recs, err := ReadProgressFile(p)
			must.NoError(t, err)
			line0, _ := encodeRecord(recs[0])
			line1, _ := encodeRecord(recs[1])
			must.NoError(t, os.WriteFile(p, append(line0, line1...), 0o644))
		}, []string{"checkpoint_000001", "checkpoint_000002"}, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := threeCheckpoints(t, root)
			tc.damage(t, filepath.Join(dir, ProgressFile))
			r := openT(t, root, Policy{})
			must.Eq(t, tc.rebuilt, r.Recovery().Rebuilt)
			must.SliceEmpty(t, r.Recovery().Removed)
			res, err := r.LatestIntact()
			must.NoError(t, err)
			must.True(t, res.OK)
			must.Eq(t, "checkpoint_000002", res.Name)
			must.Eq(t, int64(3), res.Record.Step)
			must.Eq(t, map[string]any{"epoch": 3.0}, res.Record.Metrics)
			recs, err := r.Records()
			must.NoError(t, err)
			must.Len(t, tc.records, recs)
			must.Eq(t, []string{".writer.lock", "checkpoint_000000", "checkpoint_000001", "checkpoint_000002", ProgressFile}, entries(t, dir))
			// The rebuilt file reads back, and the run goes on.
			must.NoError(t, r.Append(Record{Step: 4}))
			must.NoError(t, r.Close())
			back, err := ReadProgressFile(filepath.Join(dir, ProgressFile))
			must.NoError(t, err)
			must.Len(t, tc.records+1, back)
		})
	}
}

// TestOpenNeverDeletesUnrecordedCheckpoints: a checkpoint directory that no
// record names is not deleted. With a manifest, its record is rebuilt;
// without one (written before manifests existed), or as a stray file,
// Open stops with an error naming it and leaves everything in place.
func TestOpenNeverDeletesUnrecordedCheckpoints(t *testing.T) {
	cases := []struct {
		name  string
		stray map[string]string
	}{
		{"no manifest", map[string]string{"checkpoint_000005/model.bin": "renamed by an old version, never recorded"}},
		{"not a directory", map[string]string{"checkpoint_000002": "a stray file"}},
		{"bad manifest", map[string]string{"checkpoint_000003/" + ManifestFile: "{", "checkpoint_000003/model.bin": "w"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			r := openT(t, root, Policy{})
			commitT(t, r, map[string]string{"x": "0"}, Record{Step: 0})
			must.NoError(t, r.Close())
			dir := filepath.Join(root, "r")
			writeTree(t, dir, tc.stray)
			before := readTree(t, dir)
			_, err := Open(root, "r", Policy{})
			for name := range tc.stray {
				must.ErrorContains(t, err, filepath.Join(dir, strings.Split(name, "/")[0]))
			}
			must.Eq(t, before, readTree(t, dir), must.Sprint("nothing is deleted"))
		})
	}
}
