package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	trainhcl "github.com/nomad-train/nomad-train/hcl"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

func init() {
	register("status", "Show a run on Nomad: workers, restarts, last metrics", statusCmd)
	register("logs", "Print a worker's logs from Nomad", logsCmd)
	register("stop", "Stop a run on Nomad", stopCmd)
	register("list", "List the runs on Nomad", listCmd)
}

// progressEvery is how often a followed run's progress is re-read.
const progressEvery = 2 * time.Second

// clusterFlags are the Nomad CLI's connection flags, with its environment
// variables as defaults.
type clusterFlags struct {
	address, token, namespace, region string
	waitForCapacity                   bool
	local                             bool // -local
}

// registerLocal adds -local, for the commands that run on Nomad when an
// address is given (NOMAD_ADDR too) and on this machine otherwise.
func (f *clusterFlags) registerLocal(fs *flag.FlagSet) {
	fs.BoolVar(&f.local, "local", false, "run on this machine (the embedded default) even when NOMAD_ADDR is set")
}

// resolveLocal applies -local after parsing: no address, so the command
// runs on this machine. -local with an explicit -address is a usage error
// (code 2); code is -1 otherwise.
func (f *clusterFlags) resolveLocal(fs *flag.FlagSet, stderr io.Writer) (code int) {
	if !f.local {
		return -1
	}
	explicit := false
	fs.Visit(func(fl *flag.Flag) { explicit = explicit || fl.Name == "address" })
	if explicit {
		fmt.Fprintf(stderr, "nomad-train %s: -local and -address contradict each other\n", fs.Name())
		return exitUsage
	}
	f.address = ""
	return -1
}

func (f *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.address, "address", os.Getenv("NOMAD_ADDR"), "Nomad address (env NOMAD_ADDR)")
	// No env default here: flag help prints defaults, and a token must not
	// show up there; nomad/api reads NOMAD_TOKEN itself.
	fs.StringVar(&f.token, "token", "", "Nomad ACL token (default env NOMAD_TOKEN)")
	fs.StringVar(&f.namespace, "namespace", os.Getenv("NOMAD_NAMESPACE"), "Nomad namespace (env NOMAD_NAMESPACE)")
	fs.StringVar(&f.region, "region", os.Getenv("NOMAD_REGION"), "Nomad region (env NOMAD_REGION)")
}

func (f *clusterFlags) client() (*nomad.Client, error) {
	addr := f.address
	if addr != "" && !strings.Contains(addr, "://") {
		addr = "http://" + addr // host:port, as an agent's own address reads
	}
	return nomad.NewClient(nomad.Config{Address: addr, Token: f.token, Namespace: f.namespace, Region: f.region})
}

// runCluster submits the spec to Nomad and follows it until it ends.
// Ctrl-C detaches: the run goes on on the cluster.
func runCluster(ctx context.Context, spec *trainhcl.Spec, cf *clusterFlags, stdout, stderr io.Writer) int {
	job, diags := trainhcl.Compile(spec)
	if diags.HasErrors() {
		fmt.Fprintf(stderr, "nomad-train run: %v\n", diags)
		return 1
	}
	if cf.namespace != "" && job.Namespace == nil {
		job.Namespace = &cf.namespace
	}
	c, err := cf.client()
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		return 1
	}
	// Submitting is a deliberate new attempt: a run that failed for good
	// may try again. Best effort: this machine may not mount the storage.
	_ = storage.ClearFailed(spec.Run.StoragePath, spec.Name)
	if spec.Rendezvous.BackendFor(true) == trainhcl.BackendConsul {
		// And it starts with the whole failure budget: the last gang's
		// generation, left in Consul, would otherwise count against it.
		if kv := consulKV(); kv != nil {
			if err := nomad.ClearRendezvous(ctx, c, kv, cf.namespace, *job.ID); err != nil {
				fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
			}
		}
	}
	out := &syncWriter{w: stdout}
	fmt.Fprintf(out, "==> run %q on Nomad (%s): %s, storage %s\n",
		spec.Name, cf.address, workers(spec.Scaling.NumWorkers), spec.Run.StoragePath)
	submitted := time.Now()
	sub, err := nomad.Submit(ctx, c, job, nomad.SubmitOptions{
		WaitForCapacity: cf.waitForCapacity,
		OnBlocked: func(err error) {
			fmt.Fprintf(out, "    waiting for capacity: %v\n", err)
		},
	})
	if errors.Is(err, nomad.ErrUnplaceable) {
		fmt.Fprintf(stderr, "nomad-train run: %v\n    (nothing was started; waiting would not help until the cluster's nodes change)\n", err)
		return 1
	}
	if errors.Is(err, nomad.ErrInsufficientCapacity) {
		fmt.Fprintf(stderr, "nomad-train run: %v\n    (nothing was started; -wait-for-capacity waits until the whole gang fits)\n", err)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		return exitFor(ctx, 1)
	}
	if sub.Warnings != "" {
		fmt.Fprintf(stderr, "nomad-train run: nomad warns: %s\n", sub.Warnings)
	}
	fmt.Fprintf(out, "    job %s registered (evaluation %s)\n", sub.JobID, sub.EvalID)

	var wg sync.WaitGroup
	pctx, stopProgress := context.WithCancel(ctx)
	// Reports from before this submission are an earlier attempt's (the
	// storage keeps the run's whole history); a little slack for clocks.
	since := submitted.Add(-2 * time.Second)
	src := progressSource(cf.namespace, sub.JobID, spec.Name, spec.Run.StoragePath)
	if src != nil {
		wg.Go(func() { followProgress(pctx, src, out, since) })
	}
	printer := &statusPrinter{w: out, count: spec.Scaling.NumWorkers}
	st, err := nomad.Follow(ctx, c, nomad.FollowOptions{
		JobID: sub.JobID, Namespace: cf.namespace, Count: spec.Scaling.NumWorkers, Since: sub.Index,
		WaitForCapacity: cf.waitForCapacity, OnStatus: printer.print, Settle: followSettle,
	})
	stopProgress()
	wg.Wait()
	if src != nil {
		if rec, perr := src.Latest(context.WithoutCancel(ctx)); perr == nil && !rec.Time.Before(since) {
			fmt.Fprintln(out, "==> last report")
			fmt.Fprintf(out, "    %s\n", formatRecord(rec))
		}
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "nomad-train run: detached; %q goes on on Nomad (nomad-train status %s, nomad-train stop %s)\n",
			spec.Name, spec.Name, spec.Name)
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		// Each rank's last failure says why it stopped; the whole history
		// (every restart and reschedule) is in status.
		last := map[int]nomad.Failure{}
		for _, f := range st.Failures {
			last[f.Rank] = f // in time order
		}
		for _, r := range slices.Sorted(maps.Keys(last)) {
			fmt.Fprintf(stderr, "    %s\n", last[r])
		}
		if len(st.Failures) > len(last) {
			fmt.Fprintf(stderr, "    (nomad-train status %s lists all %d failures)\n", sub.JobID, len(st.Failures))
		}
		return 1
	}
	fmt.Fprintf(out, "==> run %q complete (%d restarts)\n", spec.Name, st.Restarts())
	return 0
}

func exitFor(ctx context.Context, code int) int {
	if ctx.Err() != nil {
		return 130
	}
	return code
}

// syncWriter serialises writes from the follower and the progress reader.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// statusPrinter prints what changed between statuses.
type statusPrinter struct {
	w        io.Writer
	count    int
	phase    nomad.Phase
	printed  map[failureKey]bool // failures already shown (the list is re-sorted as late ones arrive)
	restarts int
}

type failureKey struct {
	alloc  string
	time   int64
	reason string
}

func (p *statusPrinter) print(st nomad.Status) {
	if st.Phase != p.phase {
		p.phase = st.Phase
		line := fmt.Sprintf("    %s", st.Phase)
		if st.Phase == nomad.PhaseBlocked {
			line += fmt.Sprintf(": %d workers not placed (%s)", st.Unplaced, st.Reason)
		} else {
			running := 0
			for _, w := range st.Workers {
				if w.ClientStatus == api.AllocClientStatusRunning {
					running++
				}
			}
			line += fmt.Sprintf(": %d/%d workers placed, %d running", len(st.Workers), p.count, running)
		}
		fmt.Fprintln(p.w, line)
	}
	if p.printed == nil {
		p.printed = map[failureKey]bool{}
	}
	for _, f := range st.Failures {
		k := failureKey{f.AllocID, f.Time.UnixNano(), f.Reason}
		if !p.printed[k] {
			p.printed[k] = true
			fmt.Fprintf(p.w, "    worker failed: %s\n", f)
		}
	}
	if r := st.Restarts(); r != p.restarts {
		p.restarts = r
		fmt.Fprintf(p.w, "    restarts: %d\n", r)
	}
}

// followSettle is how long a failed run is followed further for its other
// ranks' allocations to end (nomad.FollowOptions.Settle); tests shorten it.
var followSettle = 10 * time.Second

// progressSource picks where to read the run's progress from: the shared
// storage when this machine mounts it, else Consul KV when
// CONSUL_HTTP_ADDR is set, else nowhere.
func progressSource(namespace, jobID, run, storagePath string) nomad.ProgressSource {
	var kv nomad.ProgressSource
	if c := consulKV(); c != nil {
		kv = nomad.ConsulProgress{KV: c, Namespace: namespace, Job: jobID, Run: run}
	}
	if storage.IsObjectPath(storagePath) {
		return &nomad.StoreProgress{StoragePath: storagePath, Run: run}
	}
	file := nomad.FileProgress{StoragePath: storagePath, Run: run}
	if file.Path() == "" {
		return kv
	}
	return storageOrConsul{file: file, kv: kv}
}

// storageOrConsul reads the reports from the run's storage when this
// machine mounts it, else from Consul when it can. It looks at each read:
// a first run's workers make the storage directories as they start.
type storageOrConsul struct {
	file nomad.FileProgress
	kv   nomad.ProgressSource // nil without CONSUL_HTTP_ADDR
}

func (s storageOrConsul) Latest(ctx context.Context) (storage.Record, error) {
	if s.kv == nil || s.file.Available() {
		return s.file.Latest(ctx)
	}
	return s.kv.Latest(ctx)
}

// consulKV is the KV endpoint of the Consul agent CONSUL_HTTP_ADDR names,
// or nil when it is not set.
func consulKV() *consul.KV {
	if os.Getenv("CONSUL_HTTP_ADDR") == "" {
		return nil
	}
	c, err := consul.NewClient(consul.DefaultConfig())
	if err != nil {
		return nil
	}
	return c.KV()
}

// followProgress prints each new report made since since until ctx ends.
func followProgress(ctx context.Context, src nomad.ProgressSource, w io.Writer, since time.Time) {
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	var last time.Time
	lastStep := int64(-1)
	for {
		if rec, err := src.Latest(ctx); err == nil && !rec.Time.Before(since) && (rec.Step != lastStep || !rec.Time.Equal(last)) {
			lastStep, last = rec.Step, rec.Time
			fmt.Fprintf(w, "    %s\n", formatRecord(rec))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// formatRecord is one line: step, epoch, metrics, generation, attempt.
func formatRecord(r storage.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d", r.Step)
	if e, ok := r.Metrics["epoch"]; ok {
		fmt.Fprintf(&b, " epoch %v", e)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Metrics)) {
		if k != "epoch" {
			fmt.Fprintf(&b, " %s=%v", k, r.Metrics[k])
		}
	}
	if r.Generation > 0 || r.Attempt > 0 {
		fmt.Fprintf(&b, " (generation %d, attempt %d)", r.Generation, r.Attempt)
	}
	return b.String()
}

// clusterCommand parses a cluster subcommand's flags and connects.
func clusterCommand(name, usage string, args []string, stderr io.Writer, extra func(*flag.FlagSet)) (*nomad.Client, *clusterFlags, []string, int) {
	fs := newFlagSet(name, usage, stderr)
	var cf clusterFlags
	cf.register(fs)
	if extra != nil {
		extra(fs)
	}
	pos, code := parseFlags(fs, args)
	if code >= 0 {
		return nil, nil, nil, code
	}
	if cf.address == "" {
		fmt.Fprintf(stderr, "nomad-train %s: no Nomad address: set NOMAD_ADDR or -address\n", name)
		return nil, nil, nil, exitUsage
	}
	c, err := cf.client()
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train %s: %v\n", name, err)
		return nil, nil, nil, 1
	}
	return c, &cf, pos, -1
}

// oneRun wants exactly one run name.
func oneRun(name string, pos []string, stderr io.Writer) (string, bool) {
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "nomad-train %s: want one run name, got %d arguments\n", name, len(pos))
		return "", false
	}
	return pos[0], true
}

// runState reads a run's job and current status.
func runState(ctx context.Context, c nomad.API, run string) (*nomadRun, error) {
	job, err := c.JobInfo(ctx, run)
	if err != nil {
		return nil, fmt.Errorf("reading run %q: %w", run, err)
	}
	if _, ok := job.Meta[trainhcl.MetaRun]; !ok {
		return nil, fmt.Errorf("job %q is not a nomad-train run (no meta %s)", run, trainhcl.MetaRun)
	}
	count := 0
	for _, g := range job.TaskGroups {
		if g.Name != nil && *g.Name == trainhcl.WorkerGroup && g.Count != nil {
			count = *g.Count
		}
	}
	snap, err := nomad.ReadSnapshot(ctx, c, run)
	if err != nil {
		return nil, err
	}
	t := nomad.NewTracker(trainhcl.WorkerGroup, count, true)
	// The run is the job's latest submission: what earlier ones ran is
	// not its workers (nor their failures and restarts).
	if job.JobModifyIndex != nil {
		t.Since(*job.JobModifyIndex)
	}
	t.Observe(snap)
	return &nomadRun{job: job, count: count, status: t.Status()}, nil
}

type nomadRun struct {
	job    *api.Job
	count  int
	status nomad.Status
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, _, pos, code := clusterCommand("status", "status [flags] [run]", args, stderr, nil)
	if code >= 0 {
		return code
	}
	if len(pos) == 0 {
		return listRuns(ctx, "status", c, stdout, stderr)
	}
	run, ok := oneRun("status", pos, stderr)
	if !ok {
		return exitUsage
	}
	r, err := runState(ctx, c, run)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train status: %v\n", err)
		return 1
	}
	st := r.status
	fmt.Fprintf(stdout, "run %s: %s, %d of %d workers, %d restarts\n", run, st.Phase, len(st.Workers), r.count, st.Restarts())
	if st.Phase == nomad.PhaseBlocked {
		fmt.Fprintf(stdout, "  %d workers not placed: %s\n", st.Unplaced, st.Reason)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tALLOC\tNODE\tSTATE\tRESTARTS\tLAST EVENT")
	for _, w := range st.Workers {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", w.Rank, short(w.AllocID), w.NodeName, w.ClientStatus,
			int(w.Restarts)+w.Reschedules, w.LastEvent)
	}
	tw.Flush()
	for _, f := range st.Failures {
		fmt.Fprintf(stdout, "failure: %s\n", f)
	}
	if src := progressSource(deref(r.job.Namespace), *r.job.ID, r.job.Meta[trainhcl.MetaRun], r.job.Meta[trainhcl.MetaStoragePath]); src != nil {
		if rec, err := src.Latest(ctx); err == nil {
			fmt.Fprintf(stdout, "last report: %s\n", formatRecord(rec))
		}
	}
	return 0
}

func logsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var rank int
	var follow, errStream bool
	c, _, pos, code := clusterCommand("logs", "logs [flags] <run>", args, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&rank, "rank", 0, "the worker's rank")
		fs.BoolVar(&follow, "f", false, "follow the logs")
		fs.BoolVar(&errStream, "stderr", false, "print stderr instead of stdout")
	})
	if code >= 0 {
		return code
	}
	run, ok := oneRun("logs", pos, stderr)
	if !ok {
		return exitUsage
	}
	r, err := runState(ctx, c, run)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train logs: %v\n", err)
		return 1
	}
	var allocID string
	for _, w := range r.status.Workers {
		if w.Rank == rank {
			allocID = w.AllocID
		}
	}
	if allocID == "" {
		fmt.Fprintf(stderr, "nomad-train logs: run %q has no worker with rank %d\n", run, rank)
		return 1
	}
	alloc, err := c.AllocInfo(ctx, allocID)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train logs: reading allocation %s: %v\n", short(allocID), err)
		return 1
	}
	stream := "stdout"
	if errStream {
		stream = "stderr"
	}
	rd, err := c.Logs(ctx, alloc, trainhcl.WorkerTask, stream, follow)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train logs: %v\n", err)
		return 1
	}
	defer rd.Close()
	if _, err := io.Copy(stdout, rd); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "nomad-train logs: %v\n", err)
		return 1
	}
	return exitFor(ctx, 0)
}

func stopCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var purge bool
	c, cf, pos, code := clusterCommand("stop", "stop [flags] <run>", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&purge, "purge", false, "also remove the job and its secret from Nomad")
	})
	if code >= 0 {
		return code
	}
	run, ok := oneRun("stop", pos, stderr)
	if !ok {
		return exitUsage
	}
	if err := nomad.Stop(ctx, c, run, cf.namespace, purge); err != nil {
		fmt.Fprintf(stderr, "nomad-train stop: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "run %s stopped\n", run)
	return 0
}

func listCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, _, pos, code := clusterCommand("list", "list [flags]", args, stderr, nil)
	if code >= 0 {
		return code
	}
	if len(pos) != 0 {
		fmt.Fprintln(stderr, "nomad-train list: takes no arguments")
		return exitUsage
	}
	return listRuns(ctx, "list", c, stdout, stderr)
}

// listRuns lists the runs, for the command cmd (list, or status with no
// run).
func listRuns(ctx context.Context, cmd string, c nomad.API, stdout, stderr io.Writer) int {
	runs, err := nomad.ListRuns(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train %s: %v\n", cmd, err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tJOB\tSTATUS\tSTORAGE")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.JobID, r.Status, r.StoragePath)
	}
	tw.Flush()
	return 0
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// deref is *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
