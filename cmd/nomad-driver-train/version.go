package main

import (
	"runtime"
	"runtime/debug"
)

// version is the main module's version ("(devel)" for a build from a
// checkout) with the VCS revision where the build recorded one, and the Go
// version that built it.
func version() string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(info)
}

func versionOf(info *debug.BuildInfo) string {
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
