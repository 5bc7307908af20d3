package nomad

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// The per-run secret lives in the Nomad Variable trainspec.SecretVariablePath
// (which the job's tasks may read with their workload identity) and is
// rendered by trainspec.SecretTemplate into each task's secrets directory;
// package trainspec owns those definitions so that `nomad-train compile` and
// Submit produce the same job.

// NewSecret returns a fresh per-run secret from crypto/rand, hex-encoded
// (trainspec.SecretHexLen characters).
func NewSecret() (string, error) {
	b := make([]byte, trainspec.SecretHexLen/2)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating run secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// AddSecretTemplate makes every task of job render the run's secret from
// its Variable into ${NOMAD_SECRETS_DIR}/nomad-train.secret; the train
// driver refuses tasks without it. Nomad renders templates before it starts
// the task. The secret itself never enters the job (nor its meta, nor what
// `nomad job inspect` shows). A task that already renders that file gets
// the template for job's current ID, so a job renamed after Compile (a tune
// trial, say) does not wait on another job's Variable.
func AddSecretTemplate(job *api.Job) {
	for _, g := range job.TaskGroups {
		for _, t := range g.Tasks {
			t.Templates = slices.DeleteFunc(t.Templates, func(tp *api.Template) bool {
				return tp.DestPath != nil && *tp.DestPath == trainspec.SecretDestination
			})
			t.Templates = append(t.Templates, trainspec.SecretTemplate(*job.ID))
		}
	}
}

// ErrUnplaceable: no node of the cluster as it is can run a group of the
// gang, whatever frees up (every node was filtered out by a constraint,
// none merely lacked free resources; or the gang asks more cores, CPU or
// memory than the ready nodes have when idle: IdleShortfall), so waiting
// for capacity cannot help.
// Errors that wrap it also wrap ErrInsufficientCapacity.
var ErrUnplaceable = errors.New("no node of the cluster can run the gang")

// CapacityError says which task groups of a plan could not be placed.
type CapacityError struct {
	// Groups maps a task group to why its allocations did not fit.
	Groups map[string]string
	// Unplaceable is true when some group fits on no node even when idle
	// (see ErrUnplaceable); Hints then say what the nodes lack.
	Unplaceable bool
	Hints       []string
}

func (e *CapacityError) Error() string {
	var parts []string
	for _, g := range slices.Sorted(maps.Keys(e.Groups)) {
		parts = append(parts, fmt.Sprintf("group %q: %s", g, e.Groups[g]))
	}
	if !e.Unplaceable {
		return fmt.Sprintf("%v: %s", ErrInsufficientCapacity, strings.Join(parts, "; "))
	}
	msg := fmt.Sprintf("%v: %s", ErrUnplaceable, strings.Join(parts, "; "))
	for _, h := range e.Hints {
		msg += "\n    " + h
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrInsufficientCapacity) true, and
// errors.Is(err, ErrUnplaceable) too when no node can take the gang.
func (e *CapacityError) Unwrap() []error {
	if e.Unplaceable {
		return []error{ErrUnplaceable, ErrInsufficientCapacity}
	}
	return []error{ErrInsufficientCapacity}
}

// Admit is gang admission on a plan: nil when every allocation of the job
// can be placed now, a *CapacityError when any cannot (Nomad would place
// part of the gang and block the rest).
func Admit(plan *api.JobPlanResponse) error {
	if plan == nil || len(plan.FailedTGAllocs) == 0 {
		return nil
	}
	e := &CapacityError{Groups: map[string]string{}}
	hints := map[string]bool{}
	for g, m := range plan.FailedTGAllocs {
		e.Groups[g] = DescribeMetric(m)
		if m != nil && neverFits(m) {
			e.Unplaceable = true
			for _, h := range filterHints(m) {
				hints[h] = true
			}
		}
	}
	e.Hints = slices.Sorted(maps.Keys(hints))
	return e
}

// neverFits tells from a failed placement's metric that no node can take
// the group however long one waits: there are nodes, none ran short of
// resources, every one was filtered out, and not by volume claims (which
// are released). An empty pool may be one an autoscaler fills on demand.
func neverFits(m *api.AllocationMetric) bool {
	if m.NodesEvaluated == 0 || m.NodesExhausted > 0 || len(m.DimensionExhausted) > 0 || len(m.ClassExhausted) > 0 ||
		len(m.QuotaExhausted) > 0 || len(m.ResourcesExhausted) > 0 {
		return false
	}
	for k := range m.ConstraintFiltered {
		if strings.Contains(k, "claim") {
			return false
		}
	}
	return true
}

// filterHints says what the filters of a metric most likely mean for a
// nomad-train job.
func filterHints(m *api.AllocationMetric) []string {
	var out []string
	for k := range m.ConstraintFiltered {
		switch {
		case strings.Contains(k, "missing drivers"):
			out = append(out, `no node runs the "train" task driver: put nomad-driver-train in each client's plugin_dir and enable it with a plugin "train" block`)
		case strings.Contains(k, "attr.consul"):
			out = append(out, "no node has Consul, which workers rendezvous through: give the clients a consul block")
		case strings.Contains(k, "missing devices"):
			out = append(out, "no node has the devices the workers ask for (resources_per_worker)")
		case strings.Contains(k, "distinct_hosts"):
			out = append(out, "each worker needs a node of its own (distinct_hosts) and fewer nodes qualify than there are workers")
		}
	}
	return out
}

// SubmitOptions configure Submit.
type SubmitOptions struct {
	// WaitForCapacity re-plans (with backoff) until the whole gang fits,
	// instead of refusing at once.
	WaitForCapacity bool
	// OnBlocked is called each time a plan says the gang does not fit yet.
	OnBlocked func(error)
	// Secret is the run secret; empty generates one with NewSecret.
	Secret string
	Logger hclog.Logger
	// Jitter scales backoff delays (see FollowOptions).
	Jitter func(time.Duration) time.Duration
	// PlanInterval is the first delay between plans while waiting
	// (default 2 s), doubling up to a minute.
	PlanInterval time.Duration
}

// Submission is a registered run.
type Submission struct {
	JobID    string
	EvalID   string
	Warnings string
	// Index is the Raft index the job was registered at: what the job
	// runs from then on (FollowOptions.Since).
	Index uint64
}

// Submit admits and registers job: it plans it first and refuses (or, with
// WaitForCapacity, waits) unless every worker can be placed; it writes the
// run's secret to its Variable, adds the template that delivers it, and
// registers the job.
func Submit(ctx context.Context, c API, job *api.Job, o SubmitOptions) (*Submission, error) {
	if job.ID == nil || *job.ID == "" {
		return nil, fmt.Errorf("submitting job: job has no ID")
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.PlanInterval == 0 {
		o.PlanInterval = 2 * time.Second
	}
	if o.Jitter == nil {
		o.Jitter = func(d time.Duration) time.Duration { return d }
	}
	log := o.Logger.Named("submit").With("job", *job.ID)
	AddSecretTemplate(job)
	secret := o.Secret
	if secret == "" {
		var err error
		if secret, err = NewSecret(); err != nil {
			return nil, err
		}
	}
	// A fresh attempt: its workers tell what an earlier submission left in
	// Consul and storage by the secret, and Nomad runs the job again even
	// when its spec is the one it ran (a new version).
	if job.Meta == nil {
		job.Meta = map[string]string{}
	}
	job.Meta[trainspec.MetaAttempt] = storage.AttemptID([]byte(secret))
	delay := o.PlanInterval
	for {
		plan, err := c.Plan(ctx, job)
		if err != nil {
			return nil, fmt.Errorf("planning job %q: %w", *job.ID, err)
		}
		err = Admit(plan)
		if err == nil {
			break
		}
		err = checkIdle(ctx, c, job, err)
		if !o.WaitForCapacity || errors.Is(err, ErrUnplaceable) {
			return nil, err
		}
		if o.OnBlocked != nil {
			o.OnBlocked(err)
		}
		log.Info("gang does not fit yet; waiting", "reason", err, "retry_in", delay)
		if err := sleep(ctx, o.Jitter(delay)); err != nil {
			return nil, fmt.Errorf("waiting for capacity: %w", err)
		}
		delay = min(2*delay, time.Minute)
	}
	v := &api.Variable{Path: trainspec.SecretVariablePath(*job.ID), Items: api.VariableItems{trainspec.SecretItem: secret}}
	if job.Namespace != nil {
		v.Namespace = *job.Namespace
	}
	if err := c.PutVariable(ctx, v); err != nil {
		return nil, fmt.Errorf("storing run secret: %w", err)
	}
	resp, err := c.Register(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("registering job %q: %w", *job.ID, err)
	}
	return &Submission{JobID: *job.ID, EvalID: resp.EvalID, Warnings: resp.Warnings, Index: resp.JobModifyIndex}, nil
}

// Stop stops a run's job; purge also removes the job and its secret.
func Stop(ctx context.Context, c API, jobID, namespace string, purge bool) error {
	if err := c.Deregister(ctx, jobID, purge); err != nil {
		return fmt.Errorf("stopping job %q: %w", jobID, err)
	}
	if purge {
		if err := c.DeleteVariable(ctx, trainspec.SecretVariablePath(jobID), namespace); err != nil {
			return fmt.Errorf("deleting run secret: %w", err)
		}
	}
	return nil
}

// Run is a training run found on the cluster: a job with the
// nomad_train_run meta key; or a detached experiment's tuner job (Tuner).
type Run struct {
	Name        string
	JobID       string
	Status      string
	StoragePath string
	// Experiment names the tune experiment of a trial's job, and of a
	// tuner's (whose Name it is too).
	Experiment string
	Tuner      bool
}

// ListRuns lists the training runs on the cluster, with the tune
// experiments' trials and tuners.
func ListRuns(ctx context.Context, c API) ([]Run, error) {
	jobs, err := c.Jobs(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	var out []Run
	for _, j := range jobs {
		r := Run{JobID: j.ID, Status: listStatus(j), StoragePath: j.Meta[trainspec.MetaStoragePath]}
		if name, ok := j.Meta[trainspec.MetaRun]; ok {
			r.Name, r.Experiment = name, j.Meta[trainspec.MetaExperiment]
		} else if exp, ok := j.Meta[trainspec.MetaTuner]; ok {
			r.Name, r.Experiment, r.Tuner = exp, exp, true
		} else {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// listStatus words a job's state for a run list: Nomad's "dead" covers a
// run that completed, one that failed and one that was stopped, which the
// job's stop flag and allocation summary tell apart. A dead job with both
// complete and failed allocations (a run that recovered, or one that
// failed after some ranks finished) is left for status to judge.
func listStatus(j *api.JobListStub) string {
	if j.Stop {
		if j.Status == "dead" {
			return "stopped"
		}
		return "stopping"
	}
	if j.Status != "dead" || j.JobSummary == nil {
		return j.Status
	}
	var complete, failed int
	for _, g := range j.JobSummary.Summary {
		complete += g.Complete
		failed += g.Failed + g.Lost
	}
	switch {
	case complete > 0 && failed == 0:
		return "complete"
	case failed > 0 && complete == 0:
		return "failed"
	case complete > 0:
		return fmt.Sprintf("dead (%d allocations complete, %d failed)", complete, failed)
	}
	return j.Status
}
