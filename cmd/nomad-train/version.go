package main

import (
	"context"
	"fmt"
	"io"

	"github.com/nomad-train/nomad-train/internal/buildinfo"
)

func init() {
	register("version", "Print the nomad-train version and the Go version", runVersion)
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "version", stderr)
	rest, code := parseFlags(fs, args)
	if code >= 0 {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintln(stderr, "nomad-train version: takes no arguments")
		return exitUsage
	}
	fmt.Fprintf(stdout, "nomad-train %s\n", buildinfo.Version())
	return exitOK
}
