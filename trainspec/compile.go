package trainspec

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Names in the compiled job.
const (
	// Driver is the Nomad task driver that runs workers.
	Driver = "train"
	// PortLabel is the dynamic port label for the collectives.
	PortLabel = "train"
	// MetricsPortLabel is the dynamic port each worker serves Prometheus
	// metrics on (workerenv.MetricsPath), registered as the service
	// "<run>-metrics" with MetricsTags.
	MetricsPortLabel = "metrics"
	// TorchPortLabel is the dynamic port rank 0's torch store listens on
	// (MASTER_PORT) when the workers run a command (workerenv.TorchPort).
	TorchPortLabel = "torch"
	// WorkerGroup and WorkerTask name the workers' group and task.
	WorkerGroup = "worker"
	WorkerTask  = "worker"
	// GPUDevice is the one device block GPUs are requested in.
	GPUDevice = "nvidia/gpu"
	// SpreadAttribute is what SPREAD placement spreads workers across.
	SpreadAttribute = "${node.unique.id}"
)

// Job meta keys set by Compile (and MetaAttempt, set at submission).
const (
	MetaRun         = ReservedMetaPrefix + "run"
	MetaStoragePath = ReservedMetaPrefix + "storage_path"
	MetaSpecSHA256  = ReservedMetaPrefix + "spec_sha256"
	// MetaAttempt is set at submission (not by Compile): the attempt ID of
	// the run's fresh secret (storage.AttemptID). Each submission so is a
	// new version of the job, which Nomad runs even when the spec is the
	// one it ran before.
	MetaAttempt = ReservedMetaPrefix + "attempt"
)

// The run secret authenticates the workers to each other (rendezvous and
// collectives, HMAC). It lives in the Nomad Variable SecretVariablePath(job),
// which the job's tasks may read with their workload identity, and a
// template in the worker task (SecretTemplate) renders it into the task's
// secrets directory, where the train driver finds it. The secret itself is
// never in the job.
const (
	// SecretItem is the Variable item holding the hex-encoded secret.
	SecretItem = "secret"
	// SecretFileName is the file the template renders in the secrets dir.
	SecretFileName = "nomad-train.secret"
	// SecretDestination is the template's destination, relative to the
	// task directory.
	SecretDestination = "secrets/" + SecretFileName
	// SecretHexLen is the length of a secret: 32 random bytes, hex-encoded.
	SecretHexLen = 64
)

// SecretVariablePath is the Variable path holding jobID's run secret.
func SecretVariablePath(jobID string) string { return "nomad/jobs/" + jobID }

// SecretTemplate is the template that renders jobID's run secret into
// SecretDestination. Nomad renders templates before it starts the task and
// holds the task while the Variable is missing, so a worker never starts
// without its secret; a new secret restarts the task.
func SecretTemplate(jobID string) *api.Template {
	return &api.Template{
		EmbeddedTmpl: new(fmt.Sprintf(`{{ with nomadVar %q }}{{ .%s }}{{ end }}`, SecretVariablePath(jobID), SecretItem)),
		DestPath:     new(SecretDestination),
		ChangeMode:   new("restart"),
		Perms:        new("0400"),
	}
}

// SecretCommand is the shell command that stores a fresh run secret for
// job in its Variable, for a job submitted with `nomad job run` (nomad-train
// run stores one itself). The secret goes to nomad on stdin, never on a
// command line.
func SecretCommand(job *api.Job) string {
	flags := ""
	if r := deref(job.Region); r != "" {
		flags += "-region " + shellQuote(r) + " "
	}
	if ns := deref(job.Namespace); ns != "" {
		flags += "-namespace " + shellQuote(ns) + " "
	}
	return fmt.Sprintf("od -An -tx1 -N%d /dev/urandom | tr -d ' \\n' | nomad var put %s%s %s=-",
		SecretHexLen/2, flags, shellQuote(SecretVariablePath(deref(job.ID))), SecretItem)
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain
// path characters.
func shellQuote(s string) string {
	plain := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@+,", r)) {
			plain = false
		}
	}
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Restart and reschedule timing. Nomad's default restart delay (15 s) would
// dominate recovery; 5 s is its floor for reschedule delays.
const (
	restartDelay      = time.Second
	rescheduleDelay   = 5 * time.Second
	policyInterval    = 24 * time.Hour
	unlimitedAttempts = 10
	unlimitedInterval = 10 * time.Minute
	maxRescheduleWait = time.Minute
	checkInterval     = 10 * time.Second
	checkTimeout      = 2 * time.Second
)

// Compile turns a spec into a Nomad batch job: one worker group of
// NumWorkers tasks run by the train driver, plus a controller group when the
// spec has trainer_resources. Warnings (never errors, for a spec Parse
// accepted) come back as diagnostics.
func Compile(s *Spec) (*api.Job, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	backend := s.Rendezvous.BackendFor(true)
	if backend == BackendEmbedded && s.Rendezvous.Address == "" {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagWarning,
			Summary:  "Embedded rendezvous without an address",
			Detail:   "On Nomad, workers reach the embedded rendezvous store only at an address; set rendezvous.address, or use backend = \"consul\".",
			Subject:  s.ranges.rangeOr(s.ranges.backend),
		})
	}
	if s.Rendezvous.RejoinTimeout > 0 {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagWarning,
			Summary:  "rejoin_timeout applies to local runs only",
			Detail:   "The local launcher replaces a worker that stays out of a re-forming gang for rendezvous.rejoin_timeout; on Nomad nothing replaces a frozen worker yet, and the compiled job does not carry the setting.",
		})
	}
	if !filepath.IsAbs(s.Run.StoragePath) && !strings.Contains(s.Run.StoragePath, "://") {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagWarning,
			Summary:  "Relative storage path on Nomad",
			Detail: fmt.Sprintf("On Nomad, storage_path %q resolves inside each allocation's directory: workers do not share it, and it goes when the allocation is collected. Use a directory every client mounts, such as \"/mnt/shared/results\".",
				s.Run.StoragePath),
			Subject: s.ranges.rangeOr(s.ranges.storage),
			Extra:   NeedsAddress,
		})
	}

	if from := s.Run.Checkpoint.ResumeFrom; from != "" && !filepath.IsAbs(from) && !strings.Contains(from, "://") {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagWarning,
			Summary:  "Relative resume_from on Nomad",
			Detail: fmt.Sprintf("On Nomad, resume_from %q resolves inside each allocation's directory, where no checkpoint is. Use an absolute path every client sees, or the checkpoint's s3:// location.",
				from),
			Subject: s.ranges.rangeOr(s.ranges.resumeFrom),
			Extra:   NeedsAddress,
		})
	}

	job := api.NewBatchJob(s.Name, s.Name, s.Region, s.Priority)
	if s.Region == "" {
		job.Region = nil
	}
	job.Datacenters = s.Datacenters
	if s.Namespace != "" {
		job.Namespace = new(s.Namespace)
	}
	if s.NodePool != "" {
		job.NodePool = new(s.NodePool)
	}
	job.Meta = map[string]string{}
	for k, v := range s.Meta {
		job.Meta[k] = v
	}
	job.Meta[MetaRun] = s.Name
	job.Meta[MetaStoragePath] = s.Run.StoragePath
	job.Meta[MetaSpecSHA256] = s.SHA256()

	provider := "consul"
	if backend == BackendEmbedded {
		provider = "nomad"
	}
	workers := newGroup(WorkerGroup, s.Scaling.NumWorkers, s.Run.Failure.MaxFailures)
	workers.Services = []*api.Service{{
		Name:      serviceLabel(s.Name) + "-worker",
		PortLabel: PortLabel,
		Provider:  provider,
		Tags:      []string{"nomad-train", "run=" + s.Name},
		Checks: []api.ServiceCheck{{
			Name:      "collective port",
			Type:      "tcp",
			PortLabel: PortLabel,
			Interval:  checkInterval,
			Timeout:   checkTimeout,
		}},
	}, metricsService(s.Name, provider)}
	// Nomad deregisters a stopping worker's service, waits this long, then
	// signals the task: Consul stops reporting it before it goes (and
	// Nomad warns about group services without it).
	workers.ShutdownDelay = new(ShutdownDelay)
	switch s.Scaling.PlacementStrategy {
	case PlacementSpread:
		workers.Spreads = []*api.Spread{api.NewSpread(SpreadAttribute, 100, nil)}
	case PlacementStrictSpread:
		workers.Constraints = []*api.Constraint{api.NewConstraint("", "distinct_hosts", "true")}
	}
	task := api.NewTask(WorkerTask, Driver)
	task.Config = taskConfig(s, backend)
	ep := s.Entrypoint
	if ep.Builtin != "" {
		task.Config["builtin"] = ep.Builtin
	} else {
		task.Config["command"] = ep.Command
		if len(ep.Args) > 0 {
			task.Config["args"] = ep.Args
		}
	}
	// Nomad stops and drains with SIGTERM, then SIGKILL after the kill
	// timeout (5 s by default). Workers take SIGTERM as "checkpoint now"
	// (Session.ShouldCheckpoint) and get most of a longer timeout for it.
	task.KillSignal = "SIGTERM"
	task.KillTimeout = new(KillTimeout)
	// How much of KillTimeout the worker may spend checkpointing.
	task.Env = map[string]string{workerenv.StopGrace: FormatDuration(KillTimeout - 8*time.Second),
		workerenv.MetricsAddr: "${NOMAD_ADDR_" + MetricsPortLabel + "}"}
	if ep.Builtin == "" {
		// The command gets torchrun's environment: its MASTER_PORT is a
		// port Nomad reserves (only rank 0's is used), in the range a
		// cluster's firewall opens between clients for dynamic ports.
		workers.Networks[0].DynamicPorts = append(workers.Networks[0].DynamicPorts, api.Port{Label: TorchPortLabel})
		task.Env[workerenv.TorchPort] = "${NOMAD_PORT_" + TorchPortLabel + "}"
	}
	for k, v := range s.Env {
		task.Env[k] = v
	}
	if a := ep.Artifact; a != nil {
		art := &api.TaskArtifact{GetterSource: new(a.Source), GetterOptions: a.Options}
		if a.Destination != "" {
			art.RelativeDest = new(a.Destination)
		}
		if a.Mode != "" {
			art.GetterMode = new(a.Mode)
		}
		task.Artifacts = []*api.TaskArtifact{art}
	}
	task.Templates = []*api.Template{SecretTemplate(s.Name)}
	if p := s.S3CredentialsPath(); p != "" {
		task.Templates = append(task.Templates, S3CredentialsTemplate(p))
	}
	compileVolumes(s.Volumes, workers, task)
	diags = append(diags, volumeWarnings(s.Volumes, s.Run.StoragePath, s.Run.Checkpoint.ResumeFrom)...)
	task.Resources = resources(s.Scaling.ResourcesPerWorker)
	workers.Tasks = []*api.Task{task}
	job.TaskGroups = []*api.TaskGroup{workers}

	if s.Scaling.TrainerResources != nil {
		// Ray reserves trainer_resources for its driver process. On Nomad
		// the workers coordinate through the rendezvous store and no
		// controller process runs, so there is nothing to reserve.
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagWarning,
			Summary:  "trainer_resources reserve nothing on Nomad",
			Detail:   "nomad-train runs no controller process on Nomad (the workers coordinate through the rendezvous store), so the compiled job has no group for trainer_resources.",
			Subject:  s.ranges.rangeOr(s.ranges.trainerResources),
		})
	}
	return job, diags
}

// newGroup is a task group with the collective port and the restart and
// reschedule policies derived from the failure budget.
func newGroup(name string, count, maxFailures int) *api.TaskGroup {
	g := api.NewTaskGroup(name, count)
	g.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: PortLabel}, {Label: MetricsPortLabel}}}}
	g.RestartPolicy, g.ReschedulePolicy = policies(maxFailures)
	return g
}

// ShutdownDelay is the worker group's shutdown_delay.
const ShutdownDelay = 2 * time.Second

// KillTimeout is the workers' kill_timeout: time to checkpoint after
// SIGTERM before Nomad sends SIGKILL.
const KillTimeout = 30 * time.Second

// policies derives Nomad's restart and reschedule policies from
// max_failures: each worker may be restarted in place, then rescheduled,
// as often as the whole gang may fail (the gang's budget is enforced by the
// workers' rendezvous); 0 fails the task at once, -1 never gives up.
func policies(maxFailures int) (*api.RestartPolicy, *api.ReschedulePolicy) {
	if maxFailures < 0 {
		return &api.RestartPolicy{
				Attempts: new(unlimitedAttempts),
				Interval: new(unlimitedInterval),
				Delay:    new(restartDelay),
				Mode:     new("delay"),
			}, &api.ReschedulePolicy{
				// Attempts must be an explicit 0: left unset, Nomad fills
				// in the batch default of 1, and 1 attempt with unlimited
				// is a policy it rejects as ambiguous.
				Attempts:      new(0),
				Delay:         new(rescheduleDelay),
				DelayFunction: new("exponential"),
				MaxDelay:      new(maxRescheduleWait),
				Unlimited:     new(true),
			}
	}
	restartInterval := max(policyInterval, time.Duration(maxFailures)*restartDelay)
	rescheduleInterval := max(policyInterval, time.Duration(maxFailures)*rescheduleDelay)
	return &api.RestartPolicy{
			Attempts: new(maxFailures),
			Interval: new(restartInterval),
			Delay:    new(restartDelay),
			Mode:     new("fail"),
		}, &api.ReschedulePolicy{
			Attempts:      new(maxFailures),
			Interval:      new(rescheduleInterval),
			Delay:         new(rescheduleDelay),
			DelayFunction: new("constant"),
			Unlimited:     new(false),
		}
}

// taskConfig is the train driver's config block (see the driver's schema):
// nested blocks are lists of one map, as Nomad's decoders represent them.
func taskConfig(s *Spec, backend string) map[string]any {
	rdzv := map[string]any{
		"backend": backend,
		"timeout": FormatDuration(s.Rendezvous.Timeout),
	}
	if s.Rendezvous.Address != "" {
		rdzv["address"] = s.Rendezvous.Address
	}
	if s.Rendezvous.ConsulOutageGrace > 0 {
		rdzv["consul_outage_grace"] = FormatDuration(s.Rendezvous.ConsulOutageGrace)
	}
	if s.Rendezvous.Settle > 0 {
		rdzv["settle"] = FormatDuration(s.Rendezvous.Settle)
	}
	ckpt := map[string]any{
		"num_to_keep": s.Run.Checkpoint.NumToKeep,
		"score_order": s.Run.Checkpoint.ScoreOrder,
	}
	if s.Run.Checkpoint.ScoreAttribute != "" {
		ckpt["score_attribute"] = s.Run.Checkpoint.ScoreAttribute
	}
	if a := s.Run.Checkpoint.AsyncUpload; a != nil {
		ckpt["async_upload"] = *a
	}
	if st := s.Run.Checkpoint.Staging; st != "" {
		ckpt["staging"] = st
	}
	if from := s.Run.Checkpoint.ResumeFrom; from != "" {
		ckpt["resume_from"] = from
	}
	cfg := string(s.ConfigJSON)
	if cfg == "" {
		cfg = "{}"
	}
	tc := map[string]any{
		"run_name":     s.Name,
		"world_size":   s.Scaling.NumWorkers,
		"train_config": cfg,
		"storage_path": s.Run.StoragePath,
		"port":         PortLabel,
		"rendezvous":   []map[string]any{rdzv},
		"checkpoint":   []map[string]any{ckpt},
		"failure":      []map[string]any{{"max_failures": s.Run.Failure.MaxFailures}},
	}
	if s.Scaling.MinWorkers > 0 { // elastic: the group asks for the most
		tc["min_world_size"] = s.Scaling.MinWorkers
	}
	if o := s.Run.Storage.Options(); o != (workerenv.StorageOptions{}) {
		st := map[string]any{}
		if o.Endpoint != "" {
			st["endpoint"] = o.Endpoint
		}
		if o.Region != "" {
			st["region"] = o.Region
		}
		if o.PathStyle {
			st["path_style"] = true
		}
		tc["storage"] = []map[string]any{st}
	}
	return tc
}

func resources(r Resources) *api.Resources {
	out := &api.Resources{MemoryMB: new(r.MemoryMB)}
	if r.Cores > 0 {
		out.Cores = new(r.Cores)
	} else {
		out.CPU = new(r.CPU)
	}
	if r.GPU > 0 {
		dev := &api.RequestedDevice{Name: GPUDevice, Count: new(uint64(r.GPU))}
		for _, c := range r.GPUConstraints {
			dev.Constraints = append(dev.Constraints, api.NewConstraint(c.Attribute, c.Operator, c.Value))
		}
		for _, a := range r.GPUAffinities {
			dev.Affinities = append(dev.Affinities, api.NewAffinity(a.Attribute, a.Operator, a.Value, int8(a.Weight)))
		}
		out.Devices = []*api.RequestedDevice{dev}
	}
	return out
}

// FormatDuration writes d the short way a person would: "5m", "24h",
// "1h30m", "1.5s".
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0 && d < time.Hour:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0 && d < time.Minute:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
