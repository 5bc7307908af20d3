// Package workerenv names the environment contract between whatever launches a
// worker (the local launcher, the Nomad task driver) and the training runtime
// inside it. Launchers set these variables; the runtime reads them with Load.
//
// Only the variables a launcher knows are required: ranks, local ranks and
// peer addresses come out of the rendezvous, not out of the environment.
package workerenv

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Variable names. Every name starts with NOMAD_TRAIN_.
const (
	// Worker is "1" in a process that must run the training function instead
	// of launching workers (the helper-process idiom).
	Worker = "NOMAD_TRAIN_WORKER"
	// RunName is the run's name; storage lives under StoragePath/RunName.
	RunName = "NOMAD_TRAIN_RUN"
	// WorldSize is the number of workers in the gang: the most, for an
	// elastic gang.
	WorldSize = "NOMAD_TRAIN_WORLD_SIZE"
	// MinWorldSize, below WorldSize, makes the gang elastic: it trains
	// with as few members while the others are lost or not yet there.
	MinWorldSize = "NOMAD_TRAIN_MIN_WORLD_SIZE"
	// Settle is how long an elastic gang that has its minimum waits for
	// more members before it starts (a Go duration string).
	Settle = "NOMAD_TRAIN_SETTLE"
	// RankHint is the rank this worker would like (the local launcher's index,
	// or Nomad's NOMAD_ALLOC_INDEX). The rendezvous honours it when it can.
	RankHint = "NOMAD_TRAIN_RANK_HINT"
	// MemberID identifies this worker in the rendezvous (an allocation ID on
	// Nomad, "local-<index>" locally). Unique within a run.
	MemberID = "NOMAD_TRAIN_MEMBER_ID"
	// Node names the machine; workers sharing it get local ranks.
	Node = "NOMAD_TRAIN_NODE"
	// Addr is host:port the worker listens on for collectives and advertises
	// to its peers. Port 0 picks a free port (local runs).
	Addr = "NOMAD_TRAIN_ADDR"
	// Rendezvous is the rendezvous endpoint: "embedded://host:port" for the
	// embedded store served by a launcher, "consul://" for Consul (address and
	// token from CONSUL_HTTP_ADDR / CONSUL_HTTP_TOKEN).
	Rendezvous = "NOMAD_TRAIN_RENDEZVOUS"
	// RendezvousTimeout bounds how long a worker waits for the whole gang
	// (a Go duration string).
	RendezvousTimeout = "NOMAD_TRAIN_RENDEZVOUS_TIMEOUT"
	// ConsulOutageGrace is how long a training gang rides out a failing
	// or forgetful rendezvous store (a Consul agent restart) before it gives
	// its generation up (a Go duration string; default 2m).
	ConsulOutageGrace = "NOMAD_TRAIN_CONSUL_OUTAGE_GRACE"
	// StoragePath is the root of run storage (a local or shared directory).
	StoragePath = "NOMAD_TRAIN_STORAGE_PATH"
	// StorageEndpoint, StorageRegion and StoragePathStyle are the
	// non-secret options of an s3:// StoragePath (train.hcl's storage
	// block): the server's base URL, its region, and "true" to address
	// buckets as endpoint/bucket. Unset, the AWS chain decides
	// (AWS_ENDPOINT_URL_S3, AWS_REGION, the shared config's profile).
	// Credentials are never here: they come from the AWS chain.
	StorageEndpoint  = "NOMAD_TRAIN_STORAGE_ENDPOINT"
	StorageRegion    = "NOMAD_TRAIN_STORAGE_REGION"
	StoragePathStyle = "NOMAD_TRAIN_STORAGE_PATH_STYLE"
	// Config is the training loop config as JSON.
	Config = "NOMAD_TRAIN_CONFIG"
	// Checkpoint is the checkpoint policy as JSON (see CheckpointPolicy).
	Checkpoint = "NOMAD_TRAIN_CHECKPOINT"
	// MaxFailures is the gang's failure budget (-1 unlimited).
	MaxFailures = "NOMAD_TRAIN_MAX_FAILURES"
	// Builtin names a built-in training function (e.g. "quickstart") for
	// binaries that carry them (nomad-train, nomad-driver-train).
	Builtin = "NOMAD_TRAIN_BUILTIN"
	// Events is a file the runtime appends milestone events to, one JSON
	// object per line (see Event). The task driver turns them into Nomad task
	// events. Empty means no events are written.
	Events = "NOMAD_TRAIN_EVENTS"
	// SecretFile is a file holding the run's shared secret, used to
	// authenticate collective and rendezvous connections: in the task's
	// secrets directory on Nomad, an inherited descriptor
	// (/proc/self/fd/3) in local runs.
	SecretFile = "NOMAD_TRAIN_SECRET_FILE"
	// CollectiveTimeout bounds every network wait inside a collective
	// (a Go duration string).
	CollectiveTimeout = "NOMAD_TRAIN_COLLECTIVE_TIMEOUT"
	// CollectiveTransport picks how ranks on the same host move collective
	// data: "auto" (the default: shared memory where possible; "shm" says
	// the same) or "tcp".
	CollectiveTransport = "NOMAD_TRAIN_COLLECTIVE_TRANSPORT"
	// Fsync is which progress records a worker flushes to stable storage:
	// "records" (the default: every one) or "checkpoints" (only those that
	// commit a checkpoint; metric-only records are written at once but
	// flushed with the next checkpoint, so a power loss, not a crash, can
	// lose the metrics since the last checkpoint). Tuning many short trials
	// is where the difference shows.
	Fsync = "NOMAD_TRAIN_FSYNC"
	// StopGrace is how long a worker asked to stop (SIGTERM) has to
	// checkpoint before its work is cancelled (a Go duration string).
	// Keep it below the time the launcher waits before SIGKILL (Nomad's
	// kill_timeout).
	StopGrace = "NOMAD_TRAIN_STOP_GRACE"
	// LeaseTTL is the TTL of the worker's rendezvous lease: a worker that
	// stops renewing it (a frozen process) is lost to its gang this long
	// after (a Go duration string).
	LeaseTTL = "NOMAD_TRAIN_LEASE_TTL"
	// StorageOutageGrace is how long a worker retries an object store
	// request that failed for a reason that may pass (the server
	// unreachable or restarting, a 5xx, a throttle) before it fails the
	// request, so that a gang trains through a short outage of its S3
	// server rather than spending its failure budget on it (a Go duration
	// string; default DefaultStorageOutageGrace).
	StorageOutageGrace = "NOMAD_TRAIN_STORAGE_OUTAGE_GRACE"
	// StorageStallTimeout fails an object store request whose connection
	// moved no byte either way for this long, so that it is retried (for
	// the outage grace) rather than held by a server that froze or a
	// network that silently drops its packets (a Go duration string;
	// default DefaultStorageStallTimeout). Raise it for a server that
	// works long on a request without a word.
	StorageStallTimeout = "NOMAD_TRAIN_STORAGE_STALL_TIMEOUT"
	// StallFloor and StallFactor set the progress watchdog: a gang in
	// which no collective completes for max(StallFloor, StallFactor × the
	// median time between collectives) is declared hung and re-forms.
	StallFloor  = "NOMAD_TRAIN_STALL_FLOOR"  // a Go duration string
	StallFactor = "NOMAD_TRAIN_STALL_FACTOR" // a number
	// MetricsAddr is host:port a worker serves Prometheus metrics on, at
	// /metrics (see MetricsPath): a Nomad-assigned port on a cluster
	// ("${NOMAD_ADDR_metrics}"), a free loopback port per rank locally.
	// Empty or "off" serves none.
	MetricsAddr = "NOMAD_TRAIN_METRICS_ADDR"
	// TorchPort is the port rank 0's torch store listens on for a
	// command entrypoint (MASTER_PORT): a Nomad-assigned port on a
	// cluster ("${NOMAD_PORT_torch}"), so that the port is reserved for
	// the task and inside the range a cluster's firewall opens for
	// Nomad's dynamic ports. Unset, rank 0 picks one free on its machine.
	TorchPort = "NOMAD_TRAIN_TORCH_PORT"
	// LocalDevice is the index, among the GPUs the worker sees, of its
	// first GPU. The Nomad task driver sets "0": it narrows
	// CUDA_VISIBLE_DEVICES to the allocation's own GPUs, so LOCAL_RANK
	// (torchrun's rank on the node, which counts every worker there) is
	// no device index. Where it is unset, workers share the machine's
	// GPUs and LOCAL_RANK is the index, as under torchrun.
	LocalDevice = "NOMAD_TRAIN_LOCAL_DEVICE"
)

// DefaultStorageOutageGrace is how long a worker retries a failed object
// store request by default: a server restart (a rolling upgrade of MinIO,
// say) takes seconds to tens of seconds, and a Report waiting on an upload
// meanwhile stays well inside the progress watchdog's 2m floor.
const DefaultStorageOutageGrace = time.Minute

// DefaultStorageStallTimeout is how long a worker's object store request
// may go without a byte moving: objstore's own default, half the outage
// grace, so that a stalled request is retried within it.
const DefaultStorageStallTimeout = 30 * time.Second

// MetricsPath is the HTTP path a worker serves its metrics on.
const MetricsPath = "/metrics"

// Prefix starts every variable of the worker contract. A launcher owns
// them: a job may set only the TaskSettable ones.
const Prefix = "NOMAD_TRAIN_"

// taskSettable are the runtime's tuning knobs: they change how a worker
// runs, never who it is, whom it trusts or what it runs, so a job's own
// environment may set them (nomad-train compile emits StopGrace).
var taskSettable = map[string]bool{
	CollectiveTimeout: true, CollectiveTransport: true, Fsync: true, StopGrace: true,
	LeaseTTL: true, StallFloor: true, StallFactor: true, StorageOutageGrace: true, StorageStallTimeout: true,
	MetricsAddr:             true, // where to serve /metrics: the job's own port
	TorchPort:               true, // where rank 0's torch store listens: the job's own port
	"NOMAD_TRAIN_BLAS":      true, // the matmul backend (trainer/nn.BackendEnv)
	"NOMAD_TRAIN_LOG_LEVEL": true, // the worker runtime's log level
}

// TaskSettable reports whether a job's environment may set the contract
// variable name; every other Prefix variable is the launcher's alone.
func TaskSettable(name string) bool { return taskSettable[name] }

// CheckSetting returns the error Load would give a worker whose
// environment sets the tuning variable name to value (a duration that is
// not one, say), or nil: for a value Load accepts, for a variable that is
// not the contract's or not Load's to read, and for a value with a Nomad
// interpolation (${...}), which only the client resolves.
func CheckSetting(name, value string) error {
	if !TaskSettable(name) || strings.Contains(value, "${") {
		return nil
	}
	_, err := Load(func(k string) string {
		switch k {
		case name:
			return value
		case RunName:
			return "check"
		}
		return ""
	})
	return err
}

// CheckpointPolicy is the JSON carried in Checkpoint.
type CheckpointPolicy struct {
	NumToKeep      int    `json:"num_to_keep,omitempty"` // 0 keeps all
	ScoreAttribute string `json:"score_attribute,omitempty"`
	ScoreOrder     string `json:"score_order,omitempty"` // "max" or "min"
	// AsyncUpload: checkpoint uploads go on after Report returns (nil:
	// the storage's default, on for s3:// paths).
	AsyncUpload *bool `json:"async_upload,omitempty"`
	// Staging is where ranks build checkpoints on an object store:
	// StagingDisk ("" too) or StagingMemory.
	Staging string `json:"staging,omitempty"`
	// ResumeFrom is a checkpoint the run starts from while it has none of
	// its own (Ray's resume_from_checkpoint): an s3:// checkpoint
	// location or a checkpoint directory.
	ResumeFrom string `json:"resume_from,omitempty"`
}

// Where checkpoints are built before their upload (CheckpointPolicy.Staging).
const (
	StagingDisk   = "disk"   // the node's cache directory
	StagingMemory = "memory" // a RAM-backed directory (/dev/shm)
)

// Event is one line of the Events file.
type Event struct {
	Time    time.Time         `json:"time"`
	Kind    string            `json:"kind"` // rendezvous_complete, generation_changed, checkpoint_committed, checkpoint_restored, failure_budget_used, run_failed, run_finished
	Message string            `json:"message"`
	Attrs   map[string]string `json:"attrs,omitempty"`
}

// Env is the decoded environment of one worker.
type Env struct {
	RunName   string
	WorldSize int
	// MinWorldSize is the least an elastic gang trains with (0: exactly
	// WorldSize); Settle how long it waits for more (0: the default).
	MinWorldSize      int
	Settle            time.Duration
	RankHint          int // -1 when unset
	MemberID          string
	Node              string
	Addr              string
	Rendezvous        string
	RendezvousTimeout time.Duration
	// ConsulOutageGrace is how long a Consul outage may last while the
	// ring is healthy before the worker gives up (0: the default).
	ConsulOutageGrace time.Duration
	StoragePath       string
	// StorageEndpoint, StorageRegion and StoragePathStyle are the
	// object store's options (see StorageOptions).
	StorageEndpoint   string
	StorageRegion     string
	StoragePathStyle  bool
	Config            json.RawMessage
	Checkpoint        CheckpointPolicy
	MaxFailures       int
	Builtin           string
	Events            string
	SecretFile        string
	CollectiveTimeout time.Duration
	// CollectiveTCPOnly is CollectiveTransport=tcp: no shared memory.
	CollectiveTCPOnly bool
	// FsyncCheckpointsOnly is Fsync=checkpoints.
	FsyncCheckpointsOnly bool
	StopGrace            time.Duration
	LeaseTTL             time.Duration
	// StorageOutageGrace is how long an object store request is retried
	// (StorageOutageGrace).
	StorageOutageGrace time.Duration
	// StorageStallTimeout is how long an object store request may go
	// without a byte moving (StorageStallTimeout).
	StorageStallTimeout time.Duration
	StallFloor          time.Duration
	StallFactor         float64
	// MetricsAddr is where to serve /metrics; "" serves none.
	MetricsAddr string
	// TorchPort is the port of rank 0's torch store; 0 picks a free one.
	TorchPort int
	// Mounts are the task's volumes and where the worker finds them
	// (Mounts; the Nomad task driver's, none locally).
	Mounts []Mount
}

// IsWorker reports whether this process was launched as a worker.
func IsWorker() bool { return os.Getenv(Worker) == "1" }

// Load decodes the environment through getenv (os.Getenv in production).
// It returns an error naming the first variable that is malformed or missing.
func Load(getenv func(string) string) (Env, error) {
	e := Env{
		RunName:     getenv(RunName),
		MemberID:    getenv(MemberID),
		Node:        getenv(Node),
		Addr:        getenv(Addr),
		Rendezvous:  getenv(Rendezvous),
		StoragePath: getenv(StoragePath),
		Builtin:     getenv(Builtin),

		StorageEndpoint: getenv(StorageEndpoint),
		StorageRegion:   getenv(StorageRegion),
		Events:          getenv(Events),
		SecretFile:      getenv(SecretFile),
		RankHint:        -1,
	}
	var err error
	if e.RunName == "" {
		return e, fmt.Errorf("%s is not set", RunName)
	}
	if e.WorldSize, err = intVar(getenv, WorldSize, 1); err != nil {
		return e, err
	}
	if e.WorldSize < 1 {
		return e, fmt.Errorf("%s must be at least 1, got %d", WorldSize, e.WorldSize)
	}
	if e.MinWorldSize, err = intVar(getenv, MinWorldSize, 0); err != nil {
		return e, err
	}
	if e.MinWorldSize < 0 || e.MinWorldSize > e.WorldSize {
		return e, fmt.Errorf("%s must be between 1 and %s (%d), got %d", MinWorldSize, WorldSize, e.WorldSize, e.MinWorldSize)
	}
	if e.MinWorldSize == e.WorldSize {
		e.MinWorldSize = 0 // not elastic
	}
	if e.Settle, err = durVar(getenv, Settle, 0); err != nil {
		return e, err
	}
	if e.RankHint, err = intVar(getenv, RankHint, -1); err != nil {
		return e, err
	}
	if e.MaxFailures, err = intVar(getenv, MaxFailures, 0); err != nil {
		return e, err
	}
	if e.RendezvousTimeout, err = durVar(getenv, RendezvousTimeout, 5*time.Minute); err != nil {
		return e, err
	}
	if e.ConsulOutageGrace, err = durVar(getenv, ConsulOutageGrace, 2*time.Minute); err != nil {
		return e, err
	}
	if e.CollectiveTimeout, err = durVar(getenv, CollectiveTimeout, 30*time.Second); err != nil {
		return e, err
	}
	switch v := getenv(CollectiveTransport); strings.ToLower(strings.TrimSpace(v)) {
	case "", "auto", "shm":
	case "tcp":
		e.CollectiveTCPOnly = true
	default:
		return e, fmt.Errorf("%s: unknown transport %q (want auto, shm or tcp)", CollectiveTransport, v)
	}
	switch v := getenv(StoragePathStyle); v {
	case "", "false":
	case "true":
		e.StoragePathStyle = true
	default:
		return e, fmt.Errorf("%s=%q: want true or false", StoragePathStyle, v)
	}
	switch v := getenv(Fsync); v {
	case "", "records":
	case "checkpoints":
		e.FsyncCheckpointsOnly = true
	default:
		return e, fmt.Errorf("%s=%q: want records or checkpoints", Fsync, v)
	}
	if e.Mounts, err = DecodeMounts(getenv(Mounts)); err != nil {
		return e, err
	}
	if e.StopGrace, err = durVar(getenv, StopGrace, 4*time.Second); err != nil {
		return e, err
	}
	if e.LeaseTTL, err = durVar(getenv, LeaseTTL, 10*time.Second); err != nil {
		return e, err
	}
	if e.StorageOutageGrace, err = durVar(getenv, StorageOutageGrace, DefaultStorageOutageGrace); err != nil {
		return e, err
	}
	if e.StorageStallTimeout, err = durVar(getenv, StorageStallTimeout, DefaultStorageStallTimeout); err != nil {
		return e, err
	}
	if e.StallFloor, err = durVar(getenv, StallFloor, 2*time.Minute); err != nil {
		return e, err
	}
	e.StallFactor = 20
	if v := getenv(StallFactor); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 1 {
			return e, fmt.Errorf("%s=%q is not a number above 1", StallFactor, v)
		}
		e.StallFactor = f
	}
	if e.MetricsAddr, err = metricsAddr(getenv); err != nil {
		return e, err
	}
	if v := strings.TrimSpace(getenv(TorchPort)); v != "" {
		if e.TorchPort, err = strconv.Atoi(v); err != nil || e.TorchPort < 1 || e.TorchPort > 65535 {
			return e, fmt.Errorf("%s=%q is not a port number from 1 to 65535", TorchPort, v)
		}
	}
	if v := getenv(Config); v != "" {
		if !json.Valid([]byte(v)) {
			return e, fmt.Errorf("%s is not valid JSON", Config)
		}
		e.Config = json.RawMessage(v)
	}
	if v := getenv(Checkpoint); v != "" {
		if err := json.Unmarshal([]byte(v), &e.Checkpoint); err != nil {
			return e, fmt.Errorf("%s: %w", Checkpoint, err)
		}
	}
	if e.MemberID == "" {
		e.MemberID = fmt.Sprintf("pid-%d", os.Getpid())
	}
	if e.Node == "" {
		e.Node, _ = os.Hostname()
	}
	if e.Addr == "" {
		e.Addr = "127.0.0.1:0"
	}
	return e, nil
}

// metricsAddr reads MetricsAddr: "" and "off" are none; anything else must
// be host:port with a port (0 picks a free one).
func metricsAddr(getenv func(string) string) (string, error) {
	v := strings.TrimSpace(getenv(MetricsAddr))
	if v == "" || v == "off" {
		return "", nil
	}
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", fmt.Errorf("%s=%q is not host:port: %w", MetricsAddr, v, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%s=%q: port %q is not a number from 0 to 65535", MetricsAddr, v, port)
	}
	return v, nil
}

func intVar(getenv func(string) string, name string, def int) (int, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not an integer", name, v)
	}
	return n, nil
}

func durVar(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q is not a positive duration", name, v)
	}
	return d, nil
}

// Exit codes of a worker process, read by launchers: a user error is not
// worth a retry, an infrastructure error may be, and a worker that ended
// only because a peer was lost is a consequence, not a cause.
const (
	ExitOK         = 0
	ExitUserError  = 1 // the training function returned an error or panicked
	ExitBadEnv     = 2 // the worker environment is malformed
	ExitInfraError = 3 // rendezvous, collectives or storage failed
	ExitPeerLost   = 4 // a peer was lost: the gang broke elsewhere

	ExitBudgetExhausted = 5 // the gang failed more often than max_failures allows: do not restart
	ExitStopped         = 6 // asked to stop (SIGTERM); resumable from the latest checkpoint
)
