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

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

func init() {
	register("status", "Show a run (on Nomad, or local by storage path): workers, restarts, last metrics", statusCmd)
	register("logs", "Print a worker's logs (from Nomad, or a local run's saved logs)", logsCmd)
	register("stop", "Stop a run on Nomad", stopCmd)
	register("list", "List the runs on Nomad, or under a local storage path", listCmd)
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

// runCluster submits the spec to Nomad as a new attempt and follows it
// until it ends. Ctrl-C detaches: the run goes on on the cluster.
func runCluster(ctx context.Context, spec *trainspec.Spec, job *api.Job, cf *clusterFlags, stdout, stderr io.Writer) int {
	if cf.namespace != "" && job.Namespace == nil {
		job.Namespace = &cf.namespace
	}
	c, err := cf.client()
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		return 1
	}
	out := &syncWriter{w: stdout}
	opts := nomad.RunOptions{
		AttemptOptions: nomad.AttemptOptions{StoragePath: spec.Run.StoragePath, Run: spec.Name,
			Storage:      []storage.Option{storage.WithStorageOptions(spec.Run.Storage.Options())},
			OnClearError: func(err error) { fmt.Fprintf(stderr, "nomad-train run: %v\n", err) },
			Submit: nomad.SubmitOptions{WaitForCapacity: cf.waitForCapacity,
				OnBlocked: func(err error) { fmt.Fprintf(out, "    waiting for capacity: %v\n", err) }}},
		Count:    spec.Scaling.NumWorkers,
		OnReport: func(r storage.Record) { fmt.Fprintf(out, "    %s\n", formatRecord(r)) },
		OnSubmitted: func(sub *nomad.Submission) {
			if sub.Warnings != "" {
				fmt.Fprintf(stderr, "nomad-train run: nomad warns: %s\n", sub.Warnings)
			}
			fmt.Fprintf(out, "    job %s registered (evaluation %s)\n", sub.JobID, sub.EvalID)
		},
		OnStatus:      (&statusPrinter{w: out, count: spec.Scaling.NumWorkers}).print,
		Settle:        followSettle,
		ProgressEvery: progressEvery,
	}
	kv, tree := consulKV()
	if tree != nil && spec.Rendezvous.BackendFor(true) == trainspec.BackendConsul {
		// The attempt starts with the whole failure budget: the last
		// gang's generation, left in Consul, would otherwise count.
		opts.KV = tree
	}
	opts.Progress = nomad.ProgressFor(cf.namespace, *job.ID, spec.Name, spec.Run.StoragePath, kv,
		storage.WithStorageOptions(spec.Run.Storage.Options()))
	fmt.Fprintf(out, "==> run %q on Nomad (%s): %s, storage %s\n",
		spec.Name, cf.address, workers(spec.Scaling.NumWorkers), spec.Run.StoragePath)
	res, err := nomad.RunJob(ctx, c, job, opts)
	if res.Reported {
		fmt.Fprintln(out, "==> last report")
		fmt.Fprintf(out, "    %s\n", formatRecord(res.Last))
	}
	switch {
	case errors.Is(err, nomad.ErrUnplaceable):
		fmt.Fprintf(stderr, "nomad-train run: %v\n    (nothing was started; waiting would not help until the cluster's nodes change)\n", err)
		return 1
	case errors.Is(err, nomad.ErrInsufficientCapacity):
		fmt.Fprintf(stderr, "nomad-train run: %v\n    (nothing was started; -wait-for-capacity waits until the whole gang fits)\n", err)
		return 1
	case res.Submission == nil && err != nil:
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		return exitFor(ctx, 1)
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "nomad-train run: detached; %q goes on on Nomad (nomad-train status %s, nomad-train stop %s)\n",
			spec.Name, spec.Name, spec.Name)
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		// Each rank's last failure says why it stopped; the whole history
		// (every restart and reschedule) is in status.
		last := map[int]nomad.Failure{}
		for _, f := range res.Status.Failures {
			last[f.Rank] = f // in time order
		}
		for _, r := range slices.Sorted(maps.Keys(last)) {
			fmt.Fprintf(stderr, "    %s\n", last[r])
		}
		if len(res.Status.Failures) > len(last) {
			fmt.Fprintf(stderr, "    (nomad-train status %s lists all %d failures)\n", res.Submission.JobID, len(res.Status.Failures))
		}
		return 1
	}
	fmt.Fprintf(out, "==> run %q complete (%d restarts)\n", spec.Name, res.Status.Restarts())
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

// consulKV is the Consul KV that CONSUL_HTTP_ADDR names, as the nomad
// package reads and clears it; both are nil when it is not set.
func consulKV() (nomad.KV, nomad.KVTree) {
	if c := nomad.EnvConsulKV(); c != nil {
		return c, c
	}
	return nil, nil
}

// progressSource is where status reads a run's progress from
// (nomad.ProgressFor, with Consul when CONSUL_HTTP_ADDR is set).
func progressSource(namespace, jobID, run, storagePath string, opts ...storage.Option) nomad.ProgressSource {
	kv, _ := consulKV()
	return nomad.ProgressFor(namespace, jobID, run, storagePath, kv, opts...)
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

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if code, local := localStatus(ctx, args, stdout, stderr); local {
		return code
	}
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
	r, err := nomad.ReadRun(ctx, c, run)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train status: %v\n", err)
		return 1
	}
	st := r.Status
	fmt.Fprintf(stdout, "run %s: %s, %d of %d workers, %d restarts\n", run, st.Phase, len(st.Workers), r.Count, st.Restarts())
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
	if src := progressSource(deref(r.Job.Namespace), *r.Job.ID, r.Job.Meta[trainspec.MetaRun], r.Job.Meta[trainspec.MetaStoragePath],
		storage.WithStorageOptions(trainspec.StorageOptionsOf(r.Job))); src != nil {
		if rec, err := src.Latest(ctx); err == nil {
			fmt.Fprintf(stdout, "last report: %s\n", formatRecord(rec))
		}
	}
	return 0
}

func logsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if code, local := localLogs(ctx, args, stdout, stderr); local {
		return code
	}
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
	r, err := nomad.ReadRun(ctx, c, run)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train logs: %v\n", err)
		return 1
	}
	var allocID string
	for _, w := range r.Status.Workers {
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
	rd, err := c.Logs(ctx, alloc, trainspec.WorkerTask, stream, follow)
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
	if code, local := localList(ctx, args, stdout, stderr); local {
		return code
	}
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
