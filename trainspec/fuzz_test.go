package trainspec

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary text to the parser. It must never panic, and a
// spec it accepts must compile, render, and parse back from the rendered
// HCL into the same job.
func FuzzParse(f *testing.F) {
	seeds, err := filepath.Glob("testdata/bad/*.hcl")
	if err != nil {
		f.Fatal(err)
	}
	for _, rel := range examples(f) {
		seeds = append(seeds, filepath.Join("..", filepath.FromSlash(rel)))
	}
	for _, path := range seeds {
		src, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte(minimal))
	f.Add([]byte(elasticSpec("[2, 4]")))
	f.Add([]byte("train \"x\" {\nentrypoint { builtin = \"quickstart\" }\nconfig = {\nlr = qloguniform(1e-4, 1e-1, 1e-4)\nb = qrandint(16, 128, 16)\nz = qrandn(0, 1, 0.5)\n}\ntune {\nmetric = \"loss\"\nmode = \"min\"\nsearch_alg {\ntype = \"tpe\"\nn_startup_trials = 5\n}\n}\n}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		_, _ = Format(src, "fuzz.hcl")
		spec, diags := Parse(src, "fuzz.hcl", ParseOptions{
			Vars:   map[string]string{"workers": "2"},
			Getenv: func(string) string { return "" },
		})
		if diags.HasErrors() {
			if spec != nil {
				t.Fatal("a spec returned with errors")
			}
			return
		}
		job, cdiags := Compile(spec)
		if cdiags.HasErrors() {
			t.Fatalf("compile of an accepted spec failed: %v", cdiags)
		}
		js, err := RenderJSON(job)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeJobHCL(RenderHCL(job), "fuzz.nomad.hcl")
		if err != nil {
			t.Fatalf("rendered HCL does not parse back: %v", err)
		}
		js2, err := RenderJSON(back)
		if err != nil {
			t.Fatal(err)
		}
		if string(js) != string(js2) {
			t.Fatalf("HCL round trip changed the job:\n%s\n---\n%s", js, js2)
		}
	})
}
