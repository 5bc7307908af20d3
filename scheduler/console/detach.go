package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// DetachTune registers x's tuner job (`tune -detach`), built by
// tune.TunerJob from o, and says how to follow it. It returns the exit
// code: 1 when the job cannot be built or registered.
func DetachTune(ctx context.Context, c nomad.API, x *tune.Experiment, o tune.DetachOptions, stdout, stderr io.Writer) int {
	o.Spec = x.Spec
	job, err := tune.TunerJob(o)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
		return 1
	}
	r, err := tune.Detach(ctx, c, job)
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train tune: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "==> tune %q detached: job %s (evaluation %s), storage %s\n", x.Spec.Name, *job.ID, r.EvalID,
		storage.RunLocation(x.Spec.Run.StoragePath, x.Spec.Name))
	fmt.Fprintf(stdout, "    follow it with: nomad-train status %s\n", x.Spec.Name)
	return 0
}

// RunTuner is the detached tuner, the task of the job DetachTune
// registers: the experiment's trials as Nomad jobs, resumed from its state
// when Nomad restarted the task. It returns 0 once the experiment has
// ended, with failed trials or not (they are in the state and results),
// so that Nomad does not run it again; 1 for an error of the tuner itself
// (Nomad restarts it); 130 when stopped.
func RunTuner(ctx context.Context, c nomad.API, x *tune.Experiment, namespace string, stdout, stderr io.Writer) int {
	// A tuner that cannot reach Nomad stops here, its trials as they were
	// (Nomad restarts it), instead of failing every trial's lookup.
	if _, err := c.JobInfo(ctx, tune.TunerJobID(x.Spec.Name)); err != nil && !errors.Is(err, nomad.ErrNoSuchRun) {
		fmt.Fprintf(stderr, "nomad-train tuner: reaching Nomad: %v%s\n", err, socketHint(os.Getenv("NOMAD_ADDR")))
		return 1
	}
	cfg := x.Config
	cfg.Progress, cfg.KeepErrored = stdout, true
	cfg.Instance = os.Getenv("NOMAD_ALLOC_ID") // a restart in the allocation takes the experiment's lease at once
	// Its log goes to the task's stderr, which Nomad keeps.
	log := hclog.New(&hclog.LoggerOptions{Name: "nomad-train-tuner", Output: stderr, Level: hclog.Info})
	nj := &tune.NomadJobs{API: c, Spec: x.Spec, Namespace: namespace, Logger: log}
	if kv := nomad.EnvConsulKV(); kv != nil {
		nj.KV = kv
	}
	grid, err := tune.New(nj, x.Space, cfg).Fit(ctx)
	if grid != nil {
		if werr := grid.WriteFiles(context.WithoutCancel(ctx)); werr != nil && err == nil {
			err = werr
		}
	}
	var me *tune.MetricError
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "nomad-train tuner: stopped")
		return 130
	case err != nil && !errors.As(err, &me):
		fmt.Fprintf(stderr, "nomad-train tuner: %v\n", err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "nomad-train tuner: %v\n", err) // the experiment ended
	}
	return 0
}

// maxSocketPath is the longest path a unix socket can have on Linux (its
// sun_path holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// socketHint explains a task API socket Nomad could not create: its path,
// under the client's data_dir, is too long for a unix socket.
func socketHint(addr string) string {
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok || len(path) <= maxSocketPath {
		return ""
	}
	return fmt.Sprintf("\n  the task API socket's path, %s, is %d bytes: a unix socket's is at most %d, "+
		"so Nomad made none; give the client a shorter data_dir", path, len(path), maxSocketPath)
}

// PrintDetachedStatus prints a detached experiment: its tuner job's
// status and the trial table from its state on the storage; ok is false
// when run names no detached experiment.
func PrintDetachedStatus(ctx context.Context, c nomad.API, run string, stdout, stderr io.Writer) (code int, ok bool) {
	d, err := tune.ReadDetached(ctx, c, run)
	if errors.Is(err, tune.ErrNotDetached) {
		return 0, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "nomad-train status: %v\n", err)
		return 1, true
	}
	d.Write(stdout)
	return 0, true
}
