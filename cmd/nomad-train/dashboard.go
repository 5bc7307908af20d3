package main

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/scheduler/dashboard"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

func init() {
	register("dashboard", "Serve a web dashboard of the runs and experiments (live curves)", dashboardCmd)
}

func dashboardCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dashboard", "dashboard [-listen 127.0.0.1:8265] [-address ...] [storage path or experiment dir]\n\n"+
		"Serves a web dashboard of the runs under a storage path (./results by default; s3://bucket/prefix with the AWS environment,\n"+
		"and -s3-endpoint, -s3-region, -s3-path-style as a spec's storage block gives them)\n"+
		"and, with a Nomad address, of the nomad-train jobs on the cluster. It only reads.", stderr)
	listen := fs.String("listen", "127.0.0.1:8265", "address to serve on (Ray's dashboard port, loopback only by default)")
	var so workerenv.StorageOptions // as a spec's storage block gives them
	fs.StringVar(&so.Endpoint, "s3-endpoint", "", "an s3:// storage path's endpoint (else the AWS environment's)")
	fs.StringVar(&so.Region, "s3-region", "", "an s3:// storage path's region (else the AWS environment's)")
	fs.BoolVar(&so.PathStyle, "s3-path-style", false, "address an s3:// storage path's bucket by path")
	var cf clusterFlags
	cf.Register(fs)
	positional, code := parseFlags(fs, args)
	if code >= 0 {
		return code
	}
	if len(positional) > 1 {
		fmt.Fprintf(stderr, "nomad-train dashboard: want at most one storage path, got %d arguments\n", len(positional))
		return exitUsage
	}
	opts := dashboard.Options{Storage: so, Logger: hclog.New(&hclog.LoggerOptions{Name: "nomad-train", Output: stderr, Level: hclog.Warn})}
	if len(positional) == 1 {
		opts.Root = positional[0]
	} else if cf.Address == "" {
		opts.Root = defaultStorage
	}
	if cf.Address != "" {
		c, err := cf.Client()
		if err != nil {
			return fail(stderr, "dashboard", err)
		}
		opts.Nomad = c
	}
	srv, err := dashboard.New(ctx, opts)
	if err != nil {
		return fail(stderr, "dashboard", err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *listen)
	if err != nil {
		return fail(stderr, "dashboard", err)
	}
	fmt.Fprintf(stdout, "==> dashboard at http://%s/ (Ctrl-C stops it)\n", ln.Addr())
	if err := dashboard.Serve(ctx, ln, srv.Handler()); err != nil {
		return fail(stderr, "dashboard", err)
	}
	return exitOK
}
