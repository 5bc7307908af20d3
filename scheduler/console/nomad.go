package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// NomadRun is how `run` follows a spec's run on Nomad.
type NomadRun struct {
	Address, Namespace string
	WaitForCapacity    bool
	// Settle and ProgressEvery are nomad.RunOptions'.
	Settle, ProgressEvery time.Duration
	// Live, on a terminal, shows a progress bar under the lines when the
	// config gives epochs or steps, fed by the reports as they are read.
	Live *Live
}

// FollowNomad submits spec's job to Nomad as a new attempt and follows it
// until it ends, printing its placement, failures and reports; Ctrl-C
// (ctx) detaches: the run goes on on the cluster. It returns the exit
// code: 0 complete, 1 failed or refused, 130 detached.
func FollowNomad(ctx context.Context, c nomad.API, spec *trainspec.Spec, job *api.Job, o NomadRun, stdout, stderr io.Writer) int {
	out := &syncWriter{w: stdout}
	var bar *liveBar
	if goal, ok := GoalOf(spec.ConfigJSON); ok && o.Live != nil {
		out.w = o.Live
		bar = &liveBar{live: o.Live, start: time.Now(), waiting: "submitting the job",
			t: Tracker{Goal: goal, Score: spec.Run.Checkpoint.ScoreAttribute}}
	}
	opts := nomad.SpecRunOptions(spec, job, o.Namespace)
	opts.OnClearError = func(err error) { fmt.Fprintf(stderr, "nomad-train run: %v\n", err) }
	opts.Submit = nomad.SubmitOptions{WaitForCapacity: o.WaitForCapacity,
		OnBlocked: func(err error) { fmt.Fprintf(out, "    waiting for capacity: %v\n", err) }}
	opts.OnReport = func(r storage.Record) {
		fmt.Fprintf(out, "    %s\n", FormatRecord(r))
		if bar != nil {
			bar.report(r)
		}
	}
	opts.OnSubmitted = func(sub *nomad.Submission) {
		if sub.Warnings != "" {
			fmt.Fprintf(stderr, "nomad-train run: nomad warns: %s\n", sub.Warnings)
		}
		fmt.Fprintf(out, "    job %s registered (evaluation %s); waiting for placement\n", sub.JobID, sub.EvalID)
	}
	printer := &StatusPrinter{W: out, Count: spec.Scaling.NumWorkers}
	opts.OnStatus = func(st nomad.Status) {
		printer.Print(st)
		if bar != nil {
			bar.status(waitingOnNomad(st, spec.Scaling.NumWorkers))
		}
	}
	opts.Settle, opts.ProgressEvery = o.Settle, o.ProgressEvery
	fmt.Fprintf(out, "==> run %q on Nomad (%s): %s, storage %s\n",
		spec.Name, o.Address, spec.Scaling.Workers(), spec.Run.StoragePath)
	var before storage.Record
	if opts.Progress != nil {
		before, _ = opts.Progress.Latest(ctx)
	}
	start := time.Now()
	stopBar := func() {}
	if bar != nil {
		stopBar = bar.run(ctx, 0, nil)
	}
	res, err := nomad.RunJob(ctx, c, job, opts)
	stopBar()
	if res.Reported {
		fmt.Fprintln(out, "==> last report")
		fmt.Fprintf(out, "    %s\n", FormatRecord(res.Last))
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
		if ctx.Err() != nil {
			return 130
		}
		return 1
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "nomad-train run: detached; %q goes on on Nomad (nomad-train status %s, nomad-train stop %s)\n",
			spec.Name, spec.Name, spec.Name)
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "nomad-train run: %v\n", err)
		printLastFailures(stderr, res)
		return 1
	}
	fmt.Fprintf(out, "==> run %q complete (%s)\n", spec.Name, restarts(res.Status.Restarts()))
	fmt.Fprint(out, nomadSummary(spec, res, before, time.Since(start)).Render())
	return 0
}

// nomadSummary is a run's Summary on Nomad; its best checkpoint shows when
// this machine reaches the run's storage.
func nomadSummary(spec *trainspec.Spec, res nomad.RunResult, before storage.Record, wall time.Duration) Summary {
	s := Summary{Kind: "run", Name: spec.Name, Wall: wall, Restarts: res.Status.Restarts(),
		Failures: len(res.Status.Failures), MaxFailures: spec.Run.Failure.MaxFailures, Storage: spec.Run.StoragePath,
		StorageOptions: spec.Run.Storage.Options()}
	if res.Reported {
		s.Steps = max(res.Last.Step-before.Step, 0)
	}
	if !filepath.IsAbs(spec.Run.StoragePath) && !storage.IsObjectPath(spec.Run.StoragePath) {
		return s // a relative path is the workers', not this machine's
	}
	sopt := storage.WithStorageOptions(spec.Run.Storage.Options())
	if r, err := trainer.LoadResult(spec.Run.StoragePath, spec.Name, spec.RunSpec().Checkpoint, nil, sopt); err == nil {
		s.Best, s.Score = best(r, spec.Run.Checkpoint.ScoreAttribute)
	}
	s.StartedFrom = startedFrom(spec, sopt)
	return s
}

// waitingOnNomad says what a run on Nomad waits for before its first
// report.
func waitingOnNomad(st nomad.Status, n int) string {
	running := 0
	for _, w := range st.Workers {
		if w.ClientStatus == api.AllocClientStatusRunning {
			running++
		}
	}
	switch {
	case st.Phase == nomad.PhaseBlocked:
		return fmt.Sprintf("waiting for capacity: %s not placed", workers(st.Unplaced))
	case running < n:
		return fmt.Sprintf("waiting for placement and start: %d of %s running", running, workers(n))
	}
	return fmt.Sprintf("waiting for %s to rendezvous and report", workers(n))
}

// printLastFailures prints each rank's last failure, which says why it
// stopped; the whole history (every restart and reschedule) is in status.
func printLastFailures(w io.Writer, res nomad.RunResult) {
	last := map[int]nomad.Failure{}
	for _, f := range res.Status.Failures {
		last[f.Rank] = f // in time order
	}
	for _, r := range slices.Sorted(maps.Keys(last)) {
		fmt.Fprintf(w, "    %s\n", last[r])
	}
	if len(res.Status.Failures) > len(last) {
		fmt.Fprintf(w, "    (nomad-train status %s lists all %d failures)\n", res.Submission.JobID, len(res.Status.Failures))
	}
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

// StatusPrinter prints what changed between a followed run's statuses.
type StatusPrinter struct {
	W     io.Writer
	Count int // workers in the gang

	phase    nomad.Phase
	printed  map[failureKey]bool // failures already shown (the list is re-sorted as late ones arrive)
	restarts int
}

type failureKey struct {
	alloc  string
	time   int64
	reason string
}

// Print prints what changed since the last status: the phase (with what
// the run waits for), new failures, the restart count.
func (p *StatusPrinter) Print(st nomad.Status) {
	if st.Phase != p.phase {
		p.phase = st.Phase
		line := fmt.Sprintf("    %s", st.Phase)
		if st.Phase == nomad.PhaseBlocked {
			line += fmt.Sprintf(": %s not placed (%s)", workers(st.Unplaced), st.Reason)
		} else {
			running := 0
			for _, w := range st.Workers {
				if w.ClientStatus == api.AllocClientStatusRunning {
					running++
				}
			}
			line += fmt.Sprintf(": %d/%d workers placed, %d running", len(st.Workers), p.Count, running)
			if running < p.Count && st.Phase == nomad.PhasePending {
				line += "; waiting for placement and the workers' start (image or artifact downloads included)"
			}
		}
		fmt.Fprintln(p.W, line)
	}
	if p.printed == nil {
		p.printed = map[failureKey]bool{}
	}
	for _, f := range st.Failures {
		k := failureKey{f.AllocID, f.Time.UnixNano(), f.Reason}
		if !p.printed[k] {
			p.printed[k] = true
			fmt.Fprintf(p.W, "    worker failed: %s\n", f)
		}
	}
	if r := st.Restarts(); r != p.restarts {
		p.restarts = r
		fmt.Fprintf(p.W, "    restarts: %d\n", r)
	}
}

// PrintNomadStatus prints a run on Nomad: its phase, workers, failures,
// and its last report when its storage (or Consul) has one.
func PrintNomadStatus(ctx context.Context, w io.Writer, c nomad.API, name string) error {
	r, err := nomad.ReadRun(ctx, c, name)
	if err != nil {
		return err
	}
	st := r.Status
	fmt.Fprintf(w, "run %s: %s, %d of %s, %s\n", name, st.Phase, len(st.Workers), workers(r.Count), restarts(st.Restarts()))
	if st.Phase == nomad.PhaseBlocked {
		fmt.Fprintf(w, "  %s not placed: %s\n", workers(st.Unplaced), st.Reason)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tALLOC\tNODE\tSTATE\tRESTARTS\tLAST EVENT")
	for _, wk := range st.Workers {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", wk.Rank, short(wk.AllocID), wk.NodeName, wk.ClientStatus,
			int(wk.Restarts)+wk.Reschedules, wk.LastEvent)
	}
	tw.Flush()
	for _, f := range st.Failures {
		fmt.Fprintf(w, "failure: %s\n", f)
	}
	ns := ""
	if r.Job.Namespace != nil {
		ns = *r.Job.Namespace
	}
	run, root := r.Job.Meta[trainspec.MetaRun], r.Job.Meta[trainspec.MetaStoragePath]
	sopt := storage.WithStorageOptions(trainspec.StorageOptionsOf(r.Job))
	if src := nomad.EnvProgressFor(ns, *r.Job.ID, run, root, sopt); src != nil {
		if rec, err := src.Latest(ctx); err == nil {
			fmt.Fprintf(w, "last report: %s\n", FormatRecord(rec))
		}
	}
	if storage.IsObjectPath(root) { // any machine reaches it: say where to download from
		printStart(ctx, w, root, run, sopt)
		if o, err := readStoredRun(ctx, root, run, sopt); err == nil {
			o.printCheckpoints(w, root, run)
		}
	} else if filepath.IsAbs(root) {
		printStart(ctx, w, root, run) // a shared directory, seen from here
	}
	return nil
}

// PrintRuns lists the nomad-train runs on Nomad, then the tune
// experiments there: a tune's trials are one job each, so they are
// counted under their experiment, with its detached tuner's job, rather
// than listed.
func PrintRuns(ctx context.Context, w io.Writer, c nomad.API) error {
	runs, err := nomad.ListRuns(ctx, c)
	if err != nil {
		return err
	}
	var table strings.Builder
	n := 0
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tJOB\tSTATUS\tSTORAGE")
	for _, r := range runs {
		if r.Experiment == "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.JobID, r.Status, r.StoragePath)
			n++
		}
	}
	tw.Flush()
	var exps strings.Builder
	if byName := nomadExperiments(runs); len(byName) > 0 {
		tw = tabwriter.NewWriter(&exps, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EXPERIMENT\tTUNER\tTRIAL JOBS\tSTATUS\tSTORAGE")
		for _, name := range slices.Sorted(maps.Keys(byName)) {
			e := byName[name]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", name, e.tuner, e.trials, orDash(e.counts()), e.where)
		}
		tw.Flush()
	}
	return writeTables(w, table.String(), n, exps.String())
}

// nomadExperiment is what list shows of a tune experiment on Nomad.
type nomadExperiment struct {
	tuner    string         // the detached tuner's job and status, or "-"
	where    string         // the experiment's place
	trials   int            // trial jobs
	statuses map[string]int // trial jobs by status
	trialJob string         // one of them
}

// counts says how many trial jobs are in each status.
func (e *nomadExperiment) counts() string {
	var counts []string
	for _, st := range slices.Sorted(maps.Keys(e.statuses)) {
		counts = append(counts, fmt.Sprintf("%d %s", e.statuses[st], st))
	}
	return strings.Join(counts, ", ")
}

// PrintNomadExperiment prints the experiment whose trials run as Nomad
// jobs under a tuner that is no Nomad job (tune -address on a laptop):
// its trial jobs by status, then its trial table from its storage, read
// with the trials' storage options. ok is false when no trial job names
// the experiment.
func PrintNomadExperiment(ctx context.Context, w io.Writer, c nomad.API, name string) (ok bool, err error) {
	runs, err := nomad.ListRuns(ctx, c)
	if err != nil {
		return false, err
	}
	e := nomadExperiments(runs)[name]
	if e == nil || e.trials == 0 {
		return false, nil
	}
	fmt.Fprintf(w, "experiment %s: %s on Nomad (%s), its tuner elsewhere\n", name,
		english.Count(e.trials, "trial job", "trial jobs"), e.counts())
	job, err := c.JobInfo(ctx, e.trialJob)
	if err != nil {
		return true, fmt.Errorf("reading trial job %q: %w", e.trialJob, err)
	}
	st, ok, err := tune.LoadState(ctx, e.where, storage.WithStorageOptions(trainspec.StorageOptionsOf(job)))
	switch {
	case err != nil:
		fmt.Fprintf(w, "no trial table: %v\n", err)
	case !ok:
		fmt.Fprintf(w, "no trial table in %s (a directory only the clients see?)\n", e.where)
	default:
		tune.WriteTable(w, st, st.Metric)
		tune.WriteBest(w, st)
	}
	return true, nil
}

// StopExperiment stops the Nomad jobs of the experiment name: its
// detached tuner's first, so that it starts no more trials, then each
// trial's; purge also removes them and their secrets. found is false when
// no job belongs to the experiment. A tuner that is no Nomad job (tune
// -address) is not reached: it sees its trials stop.
func StopExperiment(ctx context.Context, w io.Writer, c nomad.API, name, namespace string, purge bool) (found bool, err error) {
	runs, err := nomad.ListRuns(ctx, c)
	if err != nil {
		return false, err
	}
	var tuner, trials []string
	detached := false
	for _, r := range runs {
		if r.Experiment != name {
			continue
		}
		found, detached = true, detached || r.Tuner
		switch {
		case r.Status == "stopped" && !purge:
		case r.Tuner:
			tuner = append(tuner, r.JobID)
		default:
			trials = append(trials, r.JobID)
		}
	}
	for _, id := range append(tuner, trials...) {
		if err := nomad.Stop(ctx, c, id, namespace, purge); err != nil {
			return true, err
		}
	}
	parts := slices.Clone(tuner)
	if len(trials) > 0 {
		parts = append(parts, english.Count(len(trials), "trial job", "trial jobs"))
	}
	switch {
	case !found:
	case len(parts) == 0:
		fmt.Fprintf(w, "experiment %s: its jobs were stopped already\n", name)
	case purge:
		fmt.Fprintf(w, "experiment %s: stopped and purged %s\n", name, strings.Join(parts, " and "))
	default:
		fmt.Fprintf(w, "experiment %s: stopped %s\n", name, strings.Join(parts, " and "))
	}
	if found && !detached {
		fmt.Fprintln(w, "  a tuner running off Nomad (tune -address) sees its trials stop: stop it too")
	}
	return found, nil
}

// nomadExperiments gathers the trial and tuner jobs among runs by
// experiment.
func nomadExperiments(runs []nomad.Run) map[string]*nomadExperiment {
	exps := map[string]*nomadExperiment{}
	for _, r := range runs {
		if r.Experiment == "" {
			continue
		}
		e := exps[r.Experiment]
		if e == nil {
			e = &nomadExperiment{tuner: "-", statuses: map[string]int{}}
			exps[r.Experiment] = e
		}
		if r.Tuner {
			e.tuner, e.where = r.JobID+" "+r.Status, storage.RunLocation(r.StoragePath, r.Name)
			continue
		}
		e.trials++
		e.statuses[r.Status]++
		e.trialJob = r.JobID
		if e.where == "" {
			e.where = r.StoragePath // a trial's storage path is the experiment's place
		}
	}
	return exps
}

// CopyNomadLogs writes the output (stream: "stdout" or "stderr") of the
// worker with rank in the run's latest submission on Nomad; with follow it
// goes on until ctx is done.
func CopyNomadLogs(ctx context.Context, c nomad.API, w io.Writer, run string, rank int, stream string, follow bool) error {
	r, err := nomad.ReadRun(ctx, c, run)
	if err != nil {
		return err
	}
	var allocID string
	for _, wk := range r.Status.Workers {
		if wk.Rank == rank {
			allocID = wk.AllocID
		}
	}
	if allocID == "" {
		return fmt.Errorf("run %q has no worker with rank %d", run, rank)
	}
	alloc, err := c.AllocInfo(ctx, allocID)
	if err != nil {
		return fmt.Errorf("reading allocation %s: %w", short(allocID), err)
	}
	rd, err := c.Logs(ctx, alloc, trainspec.WorkerTask, stream, follow)
	if err != nil {
		return err
	}
	defer rd.Close()
	if _, err := io.Copy(w, rd); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
