package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

const (
	fmtMessy = "train \"x\" {\nentrypoint {\n      builtin=\"quickstart\"\n}\n}\n"
	fmtTidy  = "train \"x\" {\n  entrypoint {\n    builtin = \"quickstart\"\n  }\n}\n"
)

// A directory stands for every *.hcl file below it, recursively; other
// files in it are left alone.
func TestFmtDirectory(t *testing.T) {
	dir := t.TempDir()
	must.NoError(t, os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755))
	top := writeFile(t, dir, "train.hcl", fmtMessy)
	deep := writeFile(t, filepath.Join(dir, "sub", "deeper"), "tune.hcl", fmtMessy)
	tidy := writeFile(t, filepath.Join(dir, "sub"), "ok.hcl", fmtTidy)
	other := writeFile(t, dir, "notes.txt", fmtMessy)

	code, out, errOut := runCLI(t, "fmt", "-check", dir)
	must.Eq(t, 1, code, must.Sprint(errOut))
	must.Eq(t, deep+"\n"+top+"\n", out)

	code, out, errOut = runCLI(t, "fmt", "-write", dir)
	must.Eq(t, 0, code, must.Sprint(errOut))
	must.Eq(t, deep+"\n"+top+"\n", out)
	for _, p := range []string{top, deep, tidy} {
		must.Eq(t, fmtTidy, readFile(t, p))
	}
	must.Eq(t, fmtMessy, readFile(t, other))
}

// "-" formats standard input to standard output, also under -write.
func TestFmtStdin(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"print", []string{"fmt", "-"}, 0, fmtTidy},
		{"write prints", []string{"fmt", "-write", "-"}, 0, fmtTidy},
		{"check", []string{"fmt", "-check", "-"}, 1, "-\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := fmtStdin
			fmtStdin = strings.NewReader(fmtMessy)
			t.Cleanup(func() { fmtStdin = old })
			code, out, errOut := runCLI(t, tc.args...)
			must.Eq(t, tc.code, code, must.Sprint(errOut))
			must.Eq(t, tc.out, out)
		})
	}
}
