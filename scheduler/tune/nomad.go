package tune

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// NomadJobs is the cluster backend: each trial is a Nomad job of its own,
// the train spec compiled with the trial's run name, storage directory and
// config (trainspec.CompileTrial, job ID "<experiment>-<trial>"), admitted whole
// and registered by scheduler/nomad's Submit (gang admission, the run's
// secret Variable) and followed by its Follow. A trial the tuner stops
// (early stopping, a PBT exploit, the time budget) is stopped through
// Nomad: its job is deregistered, its workers get SIGTERM and their kill
// timeout to checkpoint, and once every allocation has ended the job and
// its secret are purged.
//
// A trial whose gang does not fit while other jobs (the experiment's other
// trials, say) hold the capacity waits, shown PENDING, and is registered
// once a plan says the whole gang fits, as Ray Tune queues trials for
// resources; the experiment's trials are admitted one at a time, so two of
// them do not both take the same free nodes. Only a gang that no node
// could ever hold (nomad.ErrUnplaceable: every node filtered out, or more
// cores or memory than the idle cluster has) fails, with the reason, and
// is not retried (ErrUnrunnable). The job's restart and reschedule policies are the
// spec's failure block, so every trial has the spec's failure budget; the
// tuner's max_failures restarts a trial whose job failed, as a new job.
//
// The tuner reads each trial's reports through storage, so the spec's
// storage_path is on S3, or is shared storage (NFS, say) that the Nomad
// clients and the machine running the tuner mount at the same path.
type NomadJobs struct {
	// API reaches Nomad (a *nomad.Client).
	API nomad.API
	// Spec is the train spec; its Name is the experiment's name and its
	// config is replaced by each trial's.
	Spec *trainspec.Spec
	// Namespace is the jobs' namespace when the spec names none.
	Namespace string
	// NoWait makes a trial whose gang does not fit now fail at once (and
	// count against the tuner's failure budget) instead of waiting for
	// capacity.
	NoWait bool
	// StopTimeout bounds how long a stopped trial's allocations get to end
	// before the job is purged anyway (default: the workers' kill timeout
	// plus 15s).
	StopTimeout time.Duration
	// OnStatus, when set, is called when a trial's job changes status.
	OnStatus func(trial string, st nomad.Status)
	// Logger receives the backend's log lines.
	Logger hclog.Logger
	// PlanInterval is the first delay between plans while waiting for
	// capacity (scheduler/nomad's default when zero).
	PlanInterval time.Duration
	// KV, when set, is the Consul KV of the trials' rendezvous: before a
	// trial's job is registered anew, what an earlier attempt left under
	// its prefix is deleted (nomad.ClearRendezvous), so that the new job
	// starts with the spec's whole failure budget, as `nomad-train run`
	// does. Without it, or when the keys cannot be cleared (a warning),
	// an earlier attempt's last generation counts against the retry's
	// budget.
	KV nomad.KVTree

	admitOnce sync.Once
	admitting chan struct{} // a token: held by the trial being admitted
}

// admission waits for the experiment's admission token and returns its
// release (called once the trial's job is placed or blocked, or it ended).
func (b *NomadJobs) admission(ctx context.Context, t TrialSpec) (func(), error) {
	b.admitOnce.Do(func() { b.admitting = make(chan struct{}, 1) })
	select {
	case b.admitting <- struct{}{}:
	default:
		b.wait(ctx, t, "waiting for capacity: the trials before it are being placed")
		select {
		case b.admitting <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return sync.OnceFunc(func() { <-b.admitting }), nil
}

// wait tells the tuner the trial waits for capacity (why) or is placed.
func (b *NomadJobs) wait(ctx context.Context, t TrialSpec, why string) {
	if t.Waiting != nil {
		t.Waiting(ctx, why)
	}
}

// Run submits the trial's job (or, after the tuner restarted, adopts the
// one with the same spec that still runs, finished, or waits to be
// placed: previous), follows it until it ends, and stops and purges it
// when ctx is cancelled.
func (b *NomadJobs) Run(ctx context.Context, t TrialSpec) error {
	log := b.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("nomad").With("trial", t.ID)
	job, diags := trainspec.CompileTrial(b.Spec, t.ID, t.StoragePath, t.Config)
	if diags.HasErrors() {
		return fmt.Errorf("compile trial %s: %w", t.ID, diags)
	}
	if job.Namespace == nil && b.Namespace != "" {
		job.Namespace = &b.Namespace
	}
	jobID, ns := *job.ID, ""
	if job.Namespace != nil {
		ns = *job.Namespace
	}
	adopt, err := b.previous(ctx, job, log)
	if err != nil {
		return b.ended(ctx, t.ID, jobID, ns, err)
	}
	var since uint64 // an adopted job's allocations are all the trial's
	release := func() {}
	if adopt != adoptedPlaced {
		// A job to register, or one registered and not placed yet
		// (which keeps its place in Nomad's queue): admitted alike.
		if release, err = b.admission(ctx, t); err != nil {
			return b.ended(ctx, t.ID, jobID, ns, err)
		}
		defer release()
	}
	if adopt == notAdopted {
		// A restart is a deliberate new attempt: a trial marked failed for
		// good may try again, with its whole failure budget.
		ao := nomad.AttemptOptions{StoragePath: t.StoragePath, Run: t.ID,
			Storage: []storage.Option{storage.WithStorageOptions(t.Storage)},
			Submit: nomad.SubmitOptions{WaitForCapacity: !b.NoWait, Logger: log, PlanInterval: b.PlanInterval,
				OnBlocked: func(err error) { b.wait(ctx, t, "waiting for capacity: "+err.Error()) }}}
		if b.Spec.Rendezvous.BackendFor(true) == trainspec.BackendConsul {
			ao.KV = b.KV
			// Keys left in place cost the trial at most a generation
			// of its budget (its records carry its attempt): not a
			// reason to fail it.
			ao.OnClearError = func(err error) {
				log.Warn("could not clear the trial's rendezvous keys: an earlier attempt's last generation counts against its failure budget", "error", err)
			}
		}
		sub, err := nomad.SubmitAttempt(ctx, b.API, job, ao)
		if errors.Is(err, nomad.ErrUnplaceable) {
			err = fmt.Errorf("%w: %w", ErrUnrunnable, err)
		}
		if err != nil {
			return b.ended(ctx, t.ID, jobID, ns, fmt.Errorf("submit trial %s: %w", t.ID, err))
		}
		since = sub.Index
	}
	b.wait(ctx, t, "")
	onStatus := func(st nomad.Status) {
		switch st.Phase {
		case nomad.PhasePending:
		case nomad.PhaseBlocked: // another job took the nodes first
			release()
			b.wait(ctx, t, "waiting for capacity: "+st.Reason)
		default:
			release() // placed (or ended): the next trial may plan
			b.wait(ctx, t, "")
		}
		if b.OnStatus != nil {
			b.OnStatus(t.ID, st)
		}
	}
	_, err = nomad.Follow(ctx, b.API, nomad.FollowOptions{JobID: jobID, Namespace: ns, Since: since,
		Count: b.Spec.Scaling.NumWorkers, WaitForCapacity: !b.NoWait, OnStatus: onStatus, Logger: log})
	release()
	if err != nil {
		err = fmt.Errorf("trial %s: %w", t.ID, err)
	}
	return b.ended(ctx, t.ID, jobID, ns, err)
}

// ended stops the trial's job when the tuner stopped the trial (ctx
// cancelled), and returns what Run returns. A trial left to another tuner
// keeps its job, for that tuner to adopt.
func (b *NomadJobs) ended(ctx context.Context, trial, jobID, ns string, err error) error {
	if ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); errors.Is(cause, errLeftToAnother) {
		return fmt.Errorf("%w: %w", errStopped, cause)
	}
	if serr := b.stop(jobID, ns); serr != nil {
		return fmt.Errorf("%w: %w; stopping its job: %w", errStopped, ctx.Err(), serr)
	}
	return fmt.Errorf("%w: %w", errStopped, ctx.Err())
}

// adoption is what previous found of a trial's earlier job.
type adoption int

const (
	notAdopted      adoption = iota // none, or one purged: register the job
	adoptedPlaced                   // live or complete: follow it
	adoptedUnplaced                 // registered, no allocation yet: follow it once admitted
)

// previous looks for a job of the trial left by an earlier attempt or an
// earlier tuner. One with the same spec is adopted when it is still live,
// when it completed (every allocation complete, none failed: it finished
// while the tuner was down), or when it is registered and waits to be
// placed (Nomad's job status "pending", no allocation yet: the tuner was
// stopped between the registration and the placement), so that a tuner
// restarted after a crash goes on following it, does not run a finished
// trial again, and does not lose a waiting job's place in Nomad's queue.
// Any other is stopped and purged first, since Nomad would not run a
// finished batch job again.
func (b *NomadJobs) previous(ctx context.Context, job *api.Job, log hclog.Logger) (adoption, error) {
	old, err := b.API.JobInfo(ctx, *job.ID)
	if errors.Is(err, nomad.ErrNoSuchRun) {
		return notAdopted, nil
	}
	if err != nil {
		return notAdopted, fmt.Errorf("look up job %q: %w", *job.ID, err)
	}
	allocs, _, err := b.API.Allocations(ctx, *job.ID, 0)
	if err != nil {
		return notAdopted, fmt.Errorf("list allocations of job %q: %w", *job.ID, err)
	}
	live, complete := false, len(allocs) > 0
	for _, a := range allocs {
		live = live || a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning
		complete = complete && a.ClientStatus == api.AllocClientStatusComplete && a.DesiredStatus == api.AllocDesiredStatusRun
	}
	// A dead job whose allocations were garbage-collected has none
	// either: only "pending" says it waits.
	waiting := len(allocs) == 0 && old.Status != nil && *old.Status == "pending"
	stopped := old.Stop != nil && *old.Stop
	sameSpec := old.Meta[trainspec.MetaSpecSHA256] == job.Meta[trainspec.MetaSpecSHA256]
	if !stopped && sameSpec {
		switch {
		case live || complete:
			log.Info("adopting the trial's running job")
			return adoptedPlaced, nil
		case waiting:
			log.Info("adopting the trial's job, registered and waiting to be placed")
			return adoptedUnplaced, nil
		}
	}
	ns := ""
	if job.Namespace != nil {
		ns = *job.Namespace
	}
	log.Info("purging the trial's earlier job before submitting it again", "stopped", stopped,
		"same_spec", sameSpec, "allocations", allocStates(allocs))
	return notAdopted, b.stop(*job.ID, ns)
}

// allocStates lists allocations as "client/desired" states, for a log.
func allocStates(allocs []*api.AllocationListStub) []string {
	out := make([]string, len(allocs))
	for i, a := range allocs {
		out[i] = a.ClientStatus + "/" + a.DesiredStatus
	}
	return out
}

// stop deregisters the job, waits (up to StopTimeout) until every
// allocation has ended, so that the trial's workers no longer write to its
// storage, then purges the job and its secret.
func (b *NomadJobs) stop(jobID, ns string) error {
	timeout := b.StopTimeout
	if timeout <= 0 {
		timeout = trainspec.KillTimeout + 15*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := b.API.JobInfo(ctx, jobID); errors.Is(err, nomad.ErrNoSuchRun) {
		return nil // never registered (stopped while it waited for capacity)
	}
	if err := nomad.Stop(ctx, b.API, jobID, ns, false); err != nil {
		return err
	}
	waitErr := waitAllocsEnded(ctx, b.API, jobID)
	// Purge even when the wait timed out: the job must not linger.
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	if err := nomad.Stop(pctx, b.API, jobID, ns, true); err != nil {
		return errors.Join(waitErr, err)
	}
	return waitErr
}

// waitAllocsEnded blocks (with blocking queries) until no allocation of
// the job is pending or running.
func waitAllocsEnded(ctx context.Context, c nomad.API, jobID string) error {
	var idx uint64
	for {
		allocs, n, err := c.Allocations(ctx, jobID, idx)
		if err != nil {
			return fmt.Errorf("wait for the allocations of %q to end: %w", jobID, err)
		}
		live := 0
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning {
				live++
			}
		}
		if live == 0 {
			return nil
		}
		if n <= idx { // no blocking index: do not spin
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("wait for the allocations of %q to end: %d still live: %w", jobID, live, ctx.Err())
		}
		idx = n
	}
}
