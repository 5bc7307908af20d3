package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
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
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintf(stdout, "nomad-train %s\n", versionString(info))
	return exitOK
}

// versionString is the main module's version ("(devel)" for a build from a
// checkout) with the VCS revision where the build recorded one, and the Go
// version that built it.
func versionString(info *debug.BuildInfo) string {
	v, goVersion := "(devel)", runtime.Version()
	if info != nil {
		if info.Main.Version != "" {
			v = info.Main.Version
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				v += " (" + s.Value + ")"
			}
		}
	}
	return v + " " + goVersion
}
