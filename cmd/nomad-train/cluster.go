package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
)

// progressEvery is how often a followed run's progress is re-read.
const progressEvery = 2 * time.Second

// followSettle is how long a failed run is followed further for its other
// ranks' allocations to end (nomad.RunOptions.Settle); tests shorten it.
var followSettle = 10 * time.Second

// clusterFlags are the Nomad CLI's connection flags and -local
// (nomad.LocalFlags), with the commands' own.
type clusterFlags struct {
	nomad.LocalFlags
	waitForCapacity bool
}

// resolveLocal applies -local after parsing (nomad.LocalFlags.ResolveLocal);
// code is exitUsage when the flags contradict each other, else -1.
func (f *clusterFlags) resolveLocal(fs *flag.FlagSet, stderr io.Writer) (code int) {
	if err := f.ResolveLocal(fs); err != nil {
		fmt.Fprintf(stderr, "nomad-train %s: %v\n", fs.Name(), err)
		return exitUsage
	}
	return -1
}
