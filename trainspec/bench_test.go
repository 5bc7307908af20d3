package trainspec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// BenchmarkCompile measures, for each example, the whole path from text to
// api.Job (Parse: syntax, variables, decode, validation; then Compile)
// against a plain hcl/v2 syntax parse of the same bytes, and reports the
// ratio as compile/parse (goal: at most 5).
func BenchmarkCompile(b *testing.B) {
	for _, rel := range examples(b) {
		src, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(rel)))
		if err != nil {
			b.Fatal(err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(rel, "examples/"), "/train.hcl")
		b.Run(name, func(b *testing.B) {
			var parse, compile time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, diags := hclsyntax.ParseConfig(src, rel, hcl.InitialPos); diags.HasErrors() {
					b.Fatal(diags)
				}
				t1 := time.Now()
				spec, diags := Parse(src, rel, ParseOptions{})
				if diags.HasErrors() {
					b.Fatal(diags)
				}
				if _, diags := Compile(spec); diags.HasErrors() {
					b.Fatal(diags)
				}
				t2 := time.Now()
				parse += t1.Sub(t0)
				compile += t2.Sub(t1)
			}
			b.ReportMetric(float64(compile)/float64(parse), "compile/parse")
			b.ReportMetric(float64(parse.Nanoseconds())/float64(b.N), "parse-ns/op")
			b.ReportMetric(float64(compile.Nanoseconds())/float64(b.N), "compile-ns/op")
		})
	}
}
