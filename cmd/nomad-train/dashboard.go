package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/scheduler/dashboard"
)

func init() {
	register("dashboard", "Serve a web dashboard of the runs and experiments (live curves)", dashboardCmd)
}

func dashboardCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dashboard", "dashboard [-listen 127.0.0.1:8265] [-address ...] [storage path or experiment dir]\n\n"+
		"Serves a web dashboard of the runs under a storage path (./results by default)\n"+
		"and, with a Nomad address, of the nomad-train jobs on the cluster. It only reads.", stderr)
	listen := fs.String("listen", "127.0.0.1:8265", "address to serve on (Ray's dashboard port, loopback only by default)")
	var cf clusterFlags
	cf.register(fs)
	positional, code := parseFlags(fs, args)
	if code >= 0 {
		return code
	}
	if len(positional) > 1 {
		fmt.Fprintf(stderr, "nomad-train dashboard: want at most one storage path, got %d arguments\n", len(positional))
		return exitUsage
	}
	opts := dashboard.Options{Logger: hclog.New(&hclog.LoggerOptions{Name: "nomad-train", Output: stderr, Level: hclog.Warn})}
	if len(positional) == 1 {
		opts.Root = positional[0]
	} else if cf.address == "" {
		opts.Root = defaultStorage
	}
	if cf.address != "" {
		c, err := cf.client()
		if err != nil {
			fmt.Fprintf(stderr, "nomad-train dashboard: %v\n", err)
			return 1
		}
		opts.Nomad = c
	}
	srv, err := dashboard.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train dashboard: %v\n", err)
		return 1
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train dashboard: %v\n", err)
		return 1
	}
	// Requests share ctx: Ctrl-C ends the open event streams too.
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	fmt.Fprintf(stdout, "==> dashboard at http://%s/ (Ctrl-C stops it)\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if hs.Shutdown(sctx) != nil {
			hs.Close()
		}
		return exitOK
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "nomad-train dashboard: %v\n", err)
		return 1
	}
	return exitOK
}
