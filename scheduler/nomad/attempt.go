package nomad

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// AttemptOptions are what a new attempt at a run needs besides its job.
type AttemptOptions struct {
	// StoragePath and Run locate the run's storage, whose failed-for-good
	// mark a new attempt clears (best effort: this machine may not mount
	// it).
	StoragePath, Run string
	// Storage are the storage's options (storage.WithStorageOptions for
	// an s3:// StoragePath).
	Storage []storage.Option
	// KV, when set, is the Consul KV of a run whose rendezvous is on
	// Consul: what the last gang left under the job's prefix is cleared
	// first (ClearRendezvous), so the attempt has its whole failure budget.
	KV KVTree
	// OnClearError, when set, is told that the rendezvous keys could not
	// be cleared, and the attempt goes on (its records carry its own
	// attempt ID, so the old keys cost it at most a generation); when nil,
	// that error ends the attempt before it is submitted.
	OnClearError func(error)
	// Submit are Submit's options.
	Submit SubmitOptions
}

// SubmitAttempt is a deliberate new attempt at a run, the one sequence
// that `nomad-train run` and the tuner's trials both use: it clears the
// run's failed-for-good mark and its rendezvous keys left in Consul, then
// submits the job (gang admission, the run's secret).
func SubmitAttempt(ctx context.Context, c API, job *api.Job, o AttemptOptions) (*Submission, error) {
	// Best effort: the storage may be on the clients only.
	_ = storage.ClearFailed(o.StoragePath, o.Run, o.Storage...)
	if o.KV != nil {
		ns := ""
		if job.Namespace != nil {
			ns = *job.Namespace
		}
		if err := ClearRendezvous(ctx, c, o.KV, ns, *job.ID); err != nil {
			if o.OnClearError == nil {
				return nil, err
			}
			o.OnClearError(err)
		}
	}
	return Submit(ctx, c, job, o.Submit)
}

// RunOptions configure RunJob.
type RunOptions struct {
	AttemptOptions
	// Count is the number of workers.
	Count int
	// Progress, when set, is where the run's reports are read while it is
	// followed; OnReport gets each new one made since the submission.
	Progress ProgressSource
	OnReport func(storage.Record)
	// ProgressEvery is how often Progress is read (default 2s).
	ProgressEvery time.Duration
	// OnSubmitted is called once the job is registered.
	OnSubmitted func(*Submission)
	// OnStatus is Follow's: called when the run's status changes.
	OnStatus func(Status)
	// Settle is Follow's: how long a failed run is followed further.
	Settle time.Duration
	Logger hclog.Logger
}

// RunResult is how a run submitted by RunJob ended, as far as it was
// followed.
type RunResult struct {
	Submission *Submission
	Status     Status
	// Last is the latest report made since the submission; Reported says
	// there is one.
	Last     storage.Record
	Reported bool
}

// RunJob submits a new attempt at a run and follows it until it ends or
// ctx is cancelled (which detaches: the run goes on), printing nothing: it
// reports through o's callbacks. The error is the submission's or the
// run's failure (Follow's).
func RunJob(ctx context.Context, c API, job *api.Job, o RunOptions) (RunResult, error) {
	submitted := time.Now()
	sub, err := SubmitAttempt(ctx, c, job, o.AttemptOptions)
	if err != nil {
		return RunResult{}, err
	}
	if o.OnSubmitted != nil {
		o.OnSubmitted(sub)
	}
	ns := ""
	if job.Namespace != nil {
		ns = *job.Namespace
	}
	// Reports from before this submission are an earlier attempt's (the
	// storage keeps the run's whole history); a little slack for clocks.
	since := submitted.Add(-2 * time.Second)
	var wg sync.WaitGroup
	pctx, stopProgress := context.WithCancel(ctx)
	if o.Progress != nil && o.OnReport != nil {
		every := o.ProgressEvery
		if every <= 0 {
			every = 2 * time.Second
		}
		wg.Go(func() { followProgress(pctx, o.Progress, since, every, o.OnReport) })
	}
	st, err := Follow(ctx, c, FollowOptions{
		JobID: sub.JobID, Namespace: ns, Count: o.Count, Since: sub.Index,
		WaitForCapacity: o.Submit.WaitForCapacity, OnStatus: o.OnStatus, Settle: o.Settle, Logger: o.Logger,
	})
	stopProgress()
	wg.Wait()
	res := RunResult{Submission: sub, Status: st}
	if o.Progress != nil {
		if rec, perr := o.Progress.Latest(context.WithoutCancel(ctx)); perr == nil && !rec.Time.Before(since) {
			res.Last, res.Reported = rec, true
		}
	}
	if err != nil {
		return res, fmt.Errorf("run %s: %w", sub.JobID, err)
	}
	return res, nil
}

// followProgress hands each new report made since since to report until
// ctx ends.
func followProgress(ctx context.Context, src ProgressSource, since time.Time, every time.Duration, report func(storage.Record)) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last time.Time
	lastStep := int64(-1)
	for {
		if rec, err := src.Latest(ctx); err == nil && !rec.Time.Before(since) && (rec.Step != lastStep || !rec.Time.Equal(last)) {
			lastStep, last = rec.Step, rec.Time
			report(rec)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunInfo is a nomad-train run on Nomad as status shows it: its job, its
// number of workers and the status of its latest submission.
type RunInfo struct {
	Job    *api.Job
	Count  int
	Status Status
}

// ReadRun reads a run's job and the status of its latest submission
// (what earlier submissions ran is not its workers, nor their failures
// and restarts).
func ReadRun(ctx context.Context, c API, run string) (*RunInfo, error) {
	job, err := c.JobInfo(ctx, run)
	if err != nil {
		return nil, fmt.Errorf("reading run %q: %w", run, err)
	}
	if _, ok := job.Meta[trainspec.MetaRun]; !ok {
		return nil, fmt.Errorf("job %q is not a nomad-train run (no meta %s)", run, trainspec.MetaRun)
	}
	count := 0
	for _, g := range job.TaskGroups {
		if g.Name != nil && *g.Name == trainspec.WorkerGroup && g.Count != nil {
			count = *g.Count
		}
	}
	snap, err := ReadSnapshot(ctx, c, run)
	if err != nil {
		return nil, err
	}
	t := NewTracker(trainspec.WorkerGroup, count, true)
	if job.JobModifyIndex != nil {
		t.Since(*job.JobModifyIndex)
	}
	t.Observe(snap)
	return &RunInfo{Job: job, Count: count, Status: t.Status()}, nil
}
