package main

import (
	"context"
	"fmt"
	"io"

	"github.com/nomad-train/nomad-train/scheduler/console"
	"github.com/nomad-train/nomad-train/trainspec"
)

func init() {
	register("download", "Copy a checkpoint (on S3 or in a run directory) into a local directory, checked against its manifest", downloadCmd)
}

const downloadUsage = `download [-spec train.hcl] <checkpoint> <dir>

Copies a checkpoint into dir (new or empty), every file checked against its manifest.
<checkpoint> is its location as run and tune print it (s3://... or a directory); with
-spec, also latest, best or a checkpoint's name in the spec's run, and the S3 options
come from the spec's storage block (else from the AWS environment).`

func downloadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("download", downloadUsage, stderr)
	var f specFlags
	f.register(fs)
	specPath := fs.String("spec", "", "take the S3 options, the run and its checkpoint policy from this train.hcl")
	pos, code := parseFlags(fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) != 2 {
		fmt.Fprintf(stderr, "nomad-train download: want a checkpoint and a directory, got %d arguments\n", len(pos))
		return exitUsage
	}
	var spec *trainspec.Spec
	if *specPath != "" {
		f.noAddress = true
		var ok bool
		if spec, _, ok = loadSpec(*specPath, &f, false, stderr); !ok {
			return exitSpec
		}
	}
	location, err := console.Download(ctx, spec, pos[0], pos[1], terminal(stderr))
	if err != nil {
		return fail(stderr, "download", err)
	}
	fmt.Fprintf(stdout, "%s -> %s (every file checked against its manifest)\n", location, pos[1])
	return exitOK
}
