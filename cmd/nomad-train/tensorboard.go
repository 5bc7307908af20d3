package main

import (
	"context"
	"fmt"
	"io"

	"github.com/nomad-train/nomad-train/scheduler/console"
)

func init() {
	register("tensorboard", "Write the reports of runs and experiments as TensorBoard event files", tensorboardCmd)
}

const tensorboardUsage = `tensorboard [-out DIR] [-follow] [storage path, experiment or run]

Writes every report of the runs under a storage path (./results by default; s3://bucket/prefix
with the AWS environment, and -s3-endpoint, -s3-region, -s3-path-style as a spec's storage
block gives them) as TensorBoard event files under DIR: <run>/ for a run, <experiment>/<trial>/
for a tune's trials. Then: tensorboard --logdir DIR. With -follow it keeps them up to date
as the runs report, until Ctrl-C.`

func tensorboardCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("tensorboard", tensorboardUsage, stderr)
	var e console.TensorBoardExport
	fs.StringVar(&e.Out, "out", "tensorboard", "the log directory to write the event files under")
	fs.BoolVar(&e.Follow, "follow", false, "keep the files up to date as the runs report, until Ctrl-C")
	fs.DurationVar(&e.Interval, "interval", 0, "with -follow, the time between looks (default 2s)")
	fs.StringVar(&e.Storage.Endpoint, "s3-endpoint", "", "an s3:// storage path's endpoint (else the AWS environment's)")
	fs.StringVar(&e.Storage.Region, "s3-region", "", "an s3:// storage path's region (else the AWS environment's)")
	fs.BoolVar(&e.Storage.PathStyle, "s3-path-style", false, "address an s3:// storage path's bucket by path")
	pos, code := parseFlags(fs, args)
	if code >= 0 {
		return code
	}
	switch len(pos) {
	case 0:
		e.Source = defaultStorage
	case 1:
		e.Source = pos[0]
	default:
		fmt.Fprintf(stderr, "nomad-train tensorboard: want at most one storage path, got %d arguments\n", len(pos))
		return exitUsage
	}
	if err := console.ExportTensorBoard(ctx, stdout, e); err != nil {
		return fail(stderr, "tensorboard", err)
	}
	return exitOK
}
