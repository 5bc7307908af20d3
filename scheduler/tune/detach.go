package tune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// A detached experiment's tuner runs on the cluster, as a Nomad batch job
// "<experiment>-tuner" of one task, so the experiment does not depend on
// the machine that started it:
//
//   - the task runs `nomad-train tuner <spec>` with the exec driver (the
//     nomad-train binary installed on the clients, as nomad-driver-train
//     is; raw_exec where the operator enables it). The train driver runs
//     training workers only; exec is on by default on Linux clients and
//     isolates the tuner. Its chroot sees /usr (so /usr/local/bin). With
//     storage on S3 the tuner keeps the experiment's state and its lease
//     there, and reads its keys as the trials' workers do (a template
//     from the Variable, or the client's role); with a shared directory,
//     a host volume mounts it into the task at storage_path;
//   - the spec travels in the job, as a template whose delimiters no spec
//     contains, so Nomad writes it verbatim into the task's local/train.hcl;
//   - it reaches Nomad through the task API socket in its secrets
//     directory, authenticated by its workload identity (identity { env =
//     true } puts the token in NOMAD_TOKEN); an ACL policy bound to the
//     job lets it register and stop the trials' jobs;
//   - its restart and reschedule policies restart a tuner that crashed or
//     lost its node, and the restarted tuner resumes the experiment from
//     its state on the storage (trials whose jobs still run are adopted,
//     not run again); ERROR trials stay so (KeepErrored).

// Names in the tuner's job.
const (
	TunerGroup = "tuner"
	TunerTask  = "tuner"
	// MetaTuner marks the tuner's job: its value is the experiment's name.
	MetaTuner = trainspec.MetaTuner
	// MetaTunerStarted is when Detach registered the job.
	MetaTunerStarted = trainspec.ReservedMetaPrefix + "tuner_started"
	// MetaTunerMetric is the experiment's metric, for status's table.
	MetaTunerMetric = trainspec.ReservedMetaPrefix + "tune_metric"
	// TunerSpecFile is where the task finds the spec.
	TunerSpecFile = "local/train.hcl"
	// TunerVolume is the host volume a client mounts the shared storage
	// through, at storage_path, for the exec driver.
	TunerVolume = "nomad-train-storage"
	// MetaTunerStorage holds an S3 storage path's non-secret options
	// (JSON), for status to read the experiment's state with.
	MetaTunerStorage = trainspec.ReservedMetaPrefix + "tuner_storage"
	// DefaultTunerCommand is where the clients have nomad-train.
	DefaultTunerCommand = "/usr/local/bin/nomad-train"
	// DefaultTunerConsul is the Consul agent a tuner reaches: its
	// client's own, where Consul's default and the workers' point too.
	DefaultTunerConsul = "127.0.0.1:8500"
	// TaskAPIAddr is the task API socket, which nomad/api dials as a
	// unix:// address.
	TaskAPIAddr = "unix://${NOMAD_SECRETS_DIR}/api.sock"
)

// The spec is embedded between delimiters no train.hcl contains, so
// consul-template renders it verbatim (a spec may hold "{{").
const (
	specLeftDelim  = "[[nomad-train-tuner-never-in-a-spec:"
	specRightDelim = ":nomad-train-tuner-never-in-a-spec]]"
)

// TunerJobID is the job ID of an experiment's detached tuner.
func TunerJobID(experiment string) string { return experiment + "-tuner" }

// DetachOptions describe a detached tuner.
type DetachOptions struct {
	// Spec is the parsed spec, Source its text as the user wrote it.
	Spec   *trainspec.Spec
	Source []byte
	// Args are flags passed on to `nomad-train tuner` before the spec
	// (-var name=value).
	Args []string
	// Namespace is the job's namespace ("" for the client's).
	Namespace string
	// Driver runs the task: "exec" (the default) or "raw_exec".
	Driver string
	// Command is nomad-train's path on the clients (DefaultTunerCommand).
	Command string
	// ConsulAddress is the Consul agent the tuner reaches from its client
	// (CONSUL_HTTP_ADDR), to clear a trial's rendezvous keys before its
	// job runs again, when the trials rendezvous through Consul; "" sets
	// none, and a retried trial then starts one generation into its
	// failure budget.
	ConsulAddress string
}

// TunerJob is the job that runs an experiment's tuner on the cluster.
func TunerJob(o DetachOptions) (*api.Job, error) {
	s := o.Spec
	if strings.Contains(string(o.Source), specLeftDelim) || strings.Contains(string(o.Source), specRightDelim) {
		return nil, fmt.Errorf("detach tuner: the spec holds %q", specLeftDelim)
	}
	if !s.Run.IsS3() && !filepath.IsAbs(s.Run.StoragePath) {
		return nil, fmt.Errorf("detach tuner: storage_path %q must be an absolute path that the clients share", s.Run.StoragePath)
	}
	if o.Driver == "" {
		o.Driver = "exec"
	}
	if o.Driver != "exec" && o.Driver != "raw_exec" {
		return nil, fmt.Errorf("detach tuner: driver %q: want exec or raw_exec", o.Driver)
	}
	if o.Command == "" {
		o.Command = DefaultTunerCommand
	}
	id := TunerJobID(s.Name)
	job := api.NewBatchJob(id, id, "", 50)
	if o.Namespace != "" {
		job.Namespace = &o.Namespace
	}
	job.Meta = map[string]string{MetaTuner: s.Name, trainspec.MetaStoragePath: s.Run.StoragePath}
	if o := s.Run.Storage.Options(); s.Run.IsS3() && o != (workerenv.StorageOptions{}) {
		b, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("detach tuner: %w", err)
		}
		job.Meta[MetaTunerStorage] = string(b)
	}
	if s.Tune != nil && s.Tune.Metric != "" {
		job.Meta[MetaTunerMetric] = s.Tune.Metric
	}
	g := api.NewTaskGroup(TunerGroup, 1)
	// A crashed tuner restarts in place three times an hour; a lost node
	// or a tuner that keeps failing is placed anew, with a growing delay.
	g.RestartPolicy = &api.RestartPolicy{Attempts: new(3), Interval: new(time.Hour), Delay: new(15 * time.Second), Mode: new("fail")}
	g.ReschedulePolicy = &api.ReschedulePolicy{Attempts: new(5), Interval: new(24 * time.Hour), Delay: new(30 * time.Second),
		DelayFunction: new("exponential"), MaxDelay: new(10 * time.Minute), Unlimited: new(false)}
	args := append([]string{"tuner"}, o.Args...)
	args = append(args, "${NOMAD_TASK_DIR}/train.hcl")
	t := api.NewTask(TunerTask, o.Driver)
	t.Config = map[string]any{"command": o.Command, "args": args}
	t.Env = map[string]string{"NOMAD_ADDR": TaskAPIAddr}
	if o.Namespace != "" {
		t.Env["NOMAD_NAMESPACE"] = o.Namespace
	}
	if o.ConsulAddress != "" && s.Rendezvous.BackendFor(true) == trainspec.BackendConsul {
		t.Env["CONSUL_HTTP_ADDR"] = o.ConsulAddress
	}
	t.Identity = &api.WorkloadIdentity{Env: true}
	t.Templates = []*api.Template{{EmbeddedTmpl: new(string(o.Source)), DestPath: new(TunerSpecFile),
		LeftDelim: new(specLeftDelim), RightDelim: new(specRightDelim), ChangeMode: new("noop"), Perms: new("0644")}}
	t.Resources = &api.Resources{CPU: new(200), MemoryMB: new(256)}
	// SIGTERM (nomad job stop) ends the experiment: the tuner stops its
	// trials' jobs, which takes their kill timeout.
	t.KillSignal = "SIGTERM"
	t.KillTimeout = new(trainspec.KillTimeout + 15*time.Second)
	if p := s.S3CredentialsPath(); p != "" {
		t.Templates = append(t.Templates, trainspec.S3CredentialsTemplate(p))
	}
	if o.Driver == "exec" && !s.Run.IsS3() {
		g.Volumes = map[string]*api.VolumeRequest{"storage": {Name: "storage", Type: "host", Source: TunerVolume}}
		t.VolumeMounts = []*api.VolumeMount{{Volume: new("storage"), Destination: new(s.Run.StoragePath)}}
	}
	g.Tasks = []*api.Task{t}
	job.TaskGroups = []*api.TaskGroup{g}
	return job, nil
}

// ErrTunerRunning: the experiment's tuner job is still live.
var ErrTunerRunning = errors.New("the experiment's tuner is running")

// Detach registers the experiment's tuner job. A tuner job that ended (the
// experiment finished, or was stopped) is run again, as a new version, and
// resumes the experiment; a live one is left alone (ErrTunerRunning):
// replacing it would stop its trials.
func Detach(ctx context.Context, c nomad.API, job *api.Job) (*api.JobRegisterResponse, error) {
	old, err := c.JobInfo(ctx, *job.ID)
	switch {
	case errors.Is(err, nomad.ErrNoSuchRun):
	case err != nil:
		return nil, fmt.Errorf("look up tuner job %q: %w", *job.ID, err)
	case (old.Stop == nil || !*old.Stop) && (old.Status == nil || *old.Status != "dead"):
		return nil, fmt.Errorf("%w: job %q; follow it with `nomad-train status`, or stop it first", ErrTunerRunning, *job.ID)
	}
	// Nomad runs a finished batch job again only as a new version.
	job.Meta[MetaTunerStarted] = time.Now().UTC().Format(time.RFC3339Nano)
	r, err := c.Register(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("register tuner job %q: %w", *job.ID, err)
	}
	return r, nil
}

// Detached is a detached experiment as status shows it: its state on the
// storage and its tuner job's status.
type Detached struct {
	Job   *api.Job
	Tuner nomad.Status
	// State is the experiment's state; nil when the tuner has not written
	// one yet (or this machine does not mount the storage).
	State *ExperimentState
	// StateErr says why State could not be read.
	StateErr error
}

// Write prints the detached experiment as status shows it: the tuner
// job's status, then the trial table.
func (d *Detached) Write(w io.Writer) {
	name := d.Job.Meta[MetaTuner]
	fmt.Fprintf(w, "experiment %s: tuner job %s %s, %s\n", name, *d.Job.ID, d.Tuner.Phase, english.Count(d.Tuner.Restarts(), "restart", "restarts"))
	for _, f := range d.Tuner.Failures { // the tuner is one task, not a rank
		fmt.Fprintf(w, "tuner failed: %s\n", f.Unranked())
	}
	switch {
	case d.StateErr != nil:
		fmt.Fprintf(w, "no trial table: %v\n", d.StateErr)
	case d.State == nil:
		fmt.Fprintf(w, "no trial table yet in %s\n", storage.RunLocation(d.Job.Meta[trainspec.MetaStoragePath], name))
	default:
		WriteTable(w, d.State, d.Job.Meta[MetaTunerMetric])
		WriteBest(w, d.State)
	}
}

// ErrNotDetached: no tuner job runs this experiment.
var ErrNotDetached = errors.New("not a detached experiment")

// ReadDetached reads a detached experiment: its tuner job, the job's
// status, and the experiment's state from the storage the job names.
func ReadDetached(ctx context.Context, c nomad.API, experiment string) (*Detached, error) {
	id := TunerJobID(experiment)
	job, err := c.JobInfo(ctx, id)
	if errors.Is(err, nomad.ErrNoSuchRun) {
		return nil, fmt.Errorf("%w: no job %q", ErrNotDetached, id)
	}
	if err != nil {
		return nil, fmt.Errorf("read tuner job %q: %w", id, err)
	}
	if job.Meta[MetaTuner] != experiment {
		return nil, fmt.Errorf("%w: job %q has no meta %s", ErrNotDetached, id, MetaTuner)
	}
	snap, err := nomad.ReadSnapshot(ctx, c, id)
	if err != nil {
		return nil, err
	}
	tr := nomad.NewTracker(TunerGroup, 1, true)
	if job.JobModifyIndex != nil {
		tr.Since(*job.JobModifyIndex)
	}
	tr.Observe(snap)
	d := &Detached{Job: job, Tuner: tr.Status()}
	var opts []storage.Option
	if b := job.Meta[MetaTunerStorage]; b != "" {
		var o workerenv.StorageOptions
		if err := json.Unmarshal([]byte(b), &o); err != nil {
			return nil, fmt.Errorf("tuner job %q: meta %s: %w", id, MetaTunerStorage, err)
		}
		opts = append(opts, storage.WithStorageOptions(o))
	}
	st, ok, err := LoadState(ctx, storage.RunLocation(job.Meta[trainspec.MetaStoragePath], experiment), opts...)
	switch {
	case err != nil:
		d.StateErr = err
	case ok:
		d.State = st
	}
	return d, nil
}
