package trainspec

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// examples lists every examples/**/*.hcl spec, relative to the module root,
// as slash paths.
func examples(t testing.TB) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join("..", "examples"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".hcl") {
			rel, err := filepath.Rel("..", path)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	must.NoError(t, err)
	must.SliceNotEmpty(t, out)
	return out
}

// compileExample parses and compiles one example with no outside variables.
func compileExample(t testing.TB, rel string) *api.Job {
	t.Helper()
	spec, diags := ParseFile(filepath.Join("..", filepath.FromSlash(rel)), ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	job, cdiags := Compile(spec)
	must.False(t, cdiags.HasErrors(), must.Sprint(diagLines(cdiags)))
	return job
}

// goldenName turns examples/gpu/train.hcl into testdata/golden/gpu.train.
func goldenName(rel string) string {
	name := strings.TrimPrefix(rel, "examples/")
	name = strings.TrimSuffix(name, ".hcl")
	return filepath.Join("testdata", "golden", strings.ReplaceAll(name, "/", "."))
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		must.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		must.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	must.NoError(t, err, must.Sprint("run go test ./trainspec -run TestGolden -update"))
	must.Eq(t, string(want), string(got))
}

// TestGolden compiles every example and compares the JSON and the rendered
// HCL with the files in testdata/golden (rewrite them with -update).
func TestGolden(t *testing.T) {
	for _, rel := range examples(t) {
		t.Run(rel, func(t *testing.T) {
			job := compileExample(t, rel)
			js, err := RenderJSON(job)
			must.NoError(t, err)
			checkGolden(t, goldenName(rel)+".json", js)
			checkGolden(t, goldenName(rel)+".nomad.hcl", RenderHCL(job))
		})
	}
}

// TestGoldenDeterministic compiles each example twice, from fresh parses,
// and wants byte-identical output (map order must not leak).
func TestGoldenDeterministic(t *testing.T) {
	for _, rel := range examples(t) {
		a, b := compileExample(t, rel), compileExample(t, rel)
		ja, err := RenderJSON(a)
		must.NoError(t, err)
		for range 5 {
			jb, err := RenderJSON(b)
			must.NoError(t, err)
			must.Eq(t, string(ja), string(jb))
			must.Eq(t, string(RenderHCL(a)), string(RenderHCL(b)))
		}
	}
}

// TestJSONRoundTrip decodes the rendered JSON the way `nomad job run -json`
// does (into api.Job inside {"Job": ...}) and wants the same JSON back.
func TestJSONRoundTrip(t *testing.T) {
	for _, rel := range examples(t) {
		t.Run(rel, func(t *testing.T) {
			js, err := RenderJSON(compileExample(t, rel))
			must.NoError(t, err)
			var wrapped struct{ Job *api.Job }
			must.NoError(t, json.Unmarshal(js, &wrapped))
			must.NotNil(t, wrapped.Job)
			again, err := RenderJSON(wrapped.Job)
			must.NoError(t, err)
			must.Eq(t, string(js), string(again))
		})
	}
}

// TestHCLRoundTrip parses the rendered jobspec with hcl/v2 back into an
// api.Job (decodeJobHCL, a decoder for the rendered subset that rejects
// anything it does not consume) and wants the same job as compiled.
func TestHCLRoundTrip(t *testing.T) {
	for _, rel := range examples(t) {
		t.Run(rel, func(t *testing.T) {
			job := compileExample(t, rel)
			src := RenderHCL(job)
			back, err := decodeJobHCL(src, rel+".nomad.hcl")
			must.NoError(t, err, must.Sprint(string(src)))
			want, err := RenderJSON(job)
			must.NoError(t, err)
			got, err := RenderJSON(back)
			must.NoError(t, err)
			must.Eq(t, string(want), string(got))
		})
	}
}
