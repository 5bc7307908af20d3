// Package buildinfo says which build of nomad-train is running.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Version is the running binary's version (String of its build info).
func Version() string {
	info, _ := debug.ReadBuildInfo()
	return String(info)
}

// String is the main module's version ("(devel)" for a build from a
// checkout) with the VCS revision where the build recorded one, and the Go
// version that built it.
func String(info *debug.BuildInfo) string {
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
