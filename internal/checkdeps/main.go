// Command checkdeps enforces the project's layers (ARCHITECTURE.md): it
// lists the module's packages with their dependencies and fails, naming
// each forbidden chain of imports, when a package reaches one that a rule
// forbids. `make check-deps` runs it from the module root.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

func main() {
	n, err := run(".", os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check-deps:", err)
		os.Exit(2)
	}
	if n > 0 {
		os.Exit(1)
	}
}

// run checks the module in dir and prints what it finds to w; it returns
// the number of violations.
func run(dir string, w io.Writer) (int, error) {
	module, err := goList(dir, "-m")
	if err != nil {
		return 0, err
	}
	out, err := goList(dir, "-deps", "-test", "-json=ImportPath,Imports", "./...")
	if err != nil {
		return 0, err
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return 0, fmt.Errorf("read go list: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	vs := Check(strings.TrimSpace(string(module)), pkgs, layers)
	for _, v := range vs {
		fmt.Fprintln(w, "forbidden:", v)
	}
	if len(vs) == 0 {
		fmt.Fprintln(w, "check-deps: ok")
	}
	return len(vs), nil
}

func goList(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}
