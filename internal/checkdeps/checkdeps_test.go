package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

const mod = "example.com/m"

func TestCheckNamesTheChain(t *testing.T) {
	pkgs := []Package{
		{ImportPath: mod + "/trainer", Imports: []string{"fmt", mod + "/trainer/storage", mod + "/trainer/launch"}},
		{ImportPath: mod + "/trainer/storage", Imports: []string{"os"}},
		{ImportPath: mod + "/trainer/launch", Imports: []string{mod + "/scheduler/local"}},
		{ImportPath: mod + "/scheduler/local", Imports: []string{mod + "/trainer/storage", "github.com/hashicorp/nomad/helper"}},
		{ImportPath: mod + "/driver", Imports: []string{"github.com/hashicorp/nomad/api", mod + "/trainer/storage", "github.com/x/y"}},
		{ImportPath: "github.com/x/y", Imports: []string{"github.com/hashicorp/consul/agent"}},
		{ImportPath: mod + "/driver [" + mod + "/driver.test]", Imports: []string{mod + "/examples/quickstart"}},
		{ImportPath: mod + "/cmd/x", Imports: []string{mod + "/examples/quickstart", mod + "/driver"}},
	}
	var got []string
	for _, v := range Check(mod, pkgs, layers) {
		got = append(got, v.String())
	}
	must.Eq(t, []string{
		// Through another module, the chain names the module between.
		"driver -> github.com/x/y -> github.com/hashicorp/consul/agent: " + layers[0].Why,
		// Each violation is reported once, by the package that makes it:
		// trainer reaches scheduler/local only through trainer/launch.
		"scheduler/local -> github.com/hashicorp/nomad/helper: " + layers[0].Why,
		"trainer/launch -> scheduler/local: " + layers[1].Why,
	}, got)
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		path, pattern string
		want          bool
	}{
		{mod + "/trainer", "trainer/...", true},
		{mod + "/trainer/nn", "trainer/...", true},
		{mod + "/trainerx", "trainer/...", false},
		{mod + "/trainspec", "trainspec", true},
		{mod + "/trainspec/x", "trainspec", false},
		{mod + "/x", "...", true},
		{"fmt", "...", false},
		{"github.com/hashicorp/nomad/api", "github.com/hashicorp/nomad/...", true},
		{"github.com/hashicorp/nomad-plugin", "github.com/hashicorp/nomad/...", false},
	} {
		must.EqOp(t, tc.want, match(mod, tc.path, tc.pattern), must.Sprint(tc))
	}
}

// The check run the way make check-deps runs it, on a module with one
// planted forbidden import: it fails and names the edge; without the
// import it passes.
func TestPlantedImportFails(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		path := filepath.Join(dir, name)
		must.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		must.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	}
	write("go.mod", "module "+mod+"\n\ngo 1.22\n")
	write("scheduler/local/local.go", "package local\n\nconst N = 1\n")
	write("trainer/trainer.go", "package trainer\n\nconst N = 2\n")

	var out bytes.Buffer
	n, err := run(dir, &out)
	must.NoError(t, err)
	must.EqOp(t, 0, n, must.Sprint(out.String()))
	must.EqOp(t, "check-deps: ok\n", out.String())

	write("trainer/trainer.go", "package trainer\n\nimport \"example.com/m/scheduler/local\"\n\nconst N = local.N\n")
	out.Reset()
	n, err = run(dir, &out)
	must.NoError(t, err)
	must.EqOp(t, 1, n)
	must.EqOp(t, "forbidden: trainer -> scheduler/local: "+layers[1].Why+"\n", out.String())
}
