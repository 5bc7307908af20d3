package nn

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/shoenig/test/must"
)

var update = flag.Bool("update", false, "rewrite golden files and fuzz seeds")

// fuzzSeeds are state files for the fuzz model: valid ones with and without
// optimizer state, and near misses.
func fuzzSeeds(t testing.TB) map[string][]byte {
	m, withOpt := trainedAdam(t)
	var without bytes.Buffer
	must.NoError(t, SaveState(&without, m, nil))
	flipped := bytes.Clone(withOpt)
	flipped[len(flipped)/2] ^= 1
	return map[string][]byte{
		"valid-adam":   withOpt,
		"valid-no-opt": without.Bytes(),
		"truncated":    withOpt[:len(withOpt)-9],
		"flipped":      flipped,
	}
}

// TestFuzzSeedCorpus keeps testdata/fuzz/FuzzLoadState in step with the
// encoder: run with -update after a format change.
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzLoadState")
	for name, data := range fuzzSeeds(t) {
		path := filepath.Join(dir, name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(data)))
		if *update {
			must.NoError(t, os.MkdirAll(dir, 0o755))
			must.NoError(t, os.WriteFile(path, []byte(want), 0o644))
		}
		got, err := os.ReadFile(path)
		must.NoError(t, err, must.Sprint("run go test -run TestFuzzSeedCorpus -update"))
		must.Eq(t, want, string(got), must.Sprintf("%s is stale; run with -update", path))
	}
}

// FuzzLoadState feeds arbitrary bytes to LoadState: it must never panic; on
// success the input must be exactly what SaveState writes for the loaded
// state, and on failure the model and optimizer must be untouched.
func FuzzLoadState(f *testing.F) {
	for _, data := range fuzzSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := ckptModel(2)
		opt := NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 0.01})
		before := bits(m.Params())
		err := LoadState(bytes.NewReader(data), m, opt)
		if err != nil {
			must.Eq(t, before, bits(m.Params()))
			must.Eq(t, 0, opt.Steps())
			return
		}
		var again bytes.Buffer
		must.NoError(t, SaveState(&again, m, opt))
		must.Eq(t, data, again.Bytes())
	})
}
