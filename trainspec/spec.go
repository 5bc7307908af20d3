package trainspec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/nomad-train/nomad-train/internal/english"
)

// Builtin training functions an entrypoint may name with builtin = "...".
const (
	// BuiltinQuickstart is the small built-in regression run used by the
	// quickstart example.
	BuiltinQuickstart = "quickstart"
)

// KnownBuiltins lists, sorted, the values entrypoint { builtin = ... } accepts.
// It mirrors the builtins package's registry (a test in cmd/nomad-train
// keeps the two equal), so the language does not depend on the runtime.
func KnownBuiltins() []string {
	return []string{"external", "mnist-cnn", "mnist-logreg", "mnist-mlp", BuiltinQuickstart}
}

// Rendezvous backends.
const (
	// BackendEmbedded is the rendezvous store served by the local launcher.
	BackendEmbedded = "embedded"
	// BackendConsul is the Consul KV and session rendezvous used on clusters.
	BackendConsul = "consul"
)

// Placement strategies (scaling { placement_strategy = ... }), named as in Ray.
const (
	// PlacementPack leaves placement to Nomad's bin packing (the default).
	PlacementPack = "PACK"
	// PlacementSpread prefers distinct nodes: a spread on ${node.unique.id}.
	PlacementSpread = "SPREAD"
	// PlacementStrictSpread requires distinct nodes: a distinct_hosts constraint.
	PlacementStrictSpread = "STRICT_SPREAD"
)

// Checkpoint score orders.
const (
	// ScoreMax keeps the checkpoints with the highest score.
	ScoreMax = "max"
	// ScoreMin keeps the checkpoints with the lowest score.
	ScoreMin = "min"
)

// Defaults applied to a spec that leaves a setting out.
const (
	DefaultNumWorkers        = 1
	DefaultStoragePath       = "./results"
	DefaultRendezvousTimeout = 5 * time.Minute
	DefaultWorkerCores       = 1    // Ray's resources_per_worker {"CPU": 1}
	DefaultWorkerMemoryMB    = 1024 // per worker
	DefaultTrainerCores      = 1    // Ray's trainer_resources {"CPU": 1}
	DefaultTrainerMemoryMB   = 256
	DefaultPriority          = 50 // Nomad's default job priority
	DefaultGPUAffinityWeight = 50
)

// Spec is a decoded, validated train "<name>" {} block with every default
// applied. Its fields are plain Go values; Compile turns it into a Nomad job
// and the local launcher runs it directly.
type Spec struct {
	// Name is the run name (the block label); it is also the Nomad job ID and
	// the directory under Run.StoragePath.
	Name        string
	Datacenters []string          `json:",omitempty"`
	Namespace   string            `json:",omitempty"`
	Region      string            `json:",omitempty"`
	NodePool    string            `json:",omitempty"`
	Priority    int               // 1..100, DefaultPriority when unset
	Meta        map[string]string `json:",omitempty"` // job meta
	Env         map[string]string `json:",omitempty"` // worker environment

	Entrypoint Entrypoint
	// ConfigJSON is the train loop config (config = {...}) as JSON text; "{}"
	// when unset. Object keys are sorted.
	ConfigJSON []byte
	Scaling    Scaling
	Run        Run
	Rendezvous Rendezvous
	// Tune is the tune block (nomad-train tune), or nil.
	Tune *Tune `json:",omitempty"`
	// Volumes are the volume blocks: Nomad volumes mounted into every
	// worker.
	Volumes []Volume `json:",omitempty"`

	// ranges remembers where some settings were written, for diagnostics
	// raised after decoding (by Compile).
	ranges specRanges
}

type specRanges struct {
	block      hcl.Range // train "name" header
	backend    hcl.Range
	storage    hcl.Range
	resumeFrom hcl.Range
	tune       hcl.Range
	numWorkers hcl.Range // the num_workers attribute
	// trainerResources is the trainer_resources block's header.
	trainerResources hcl.Range
}

// rangeOr is r, or the train block's header when r was not recorded (a
// setting left to its default, or a Spec built in Go).
func (sr specRanges) rangeOr(r hcl.Range) *hcl.Range {
	if r == (hcl.Range{}) {
		r = sr.block
	}
	return r.Ptr()
}

// Entrypoint says what each worker runs: a builtin, or a user's command
// (optionally fetched with an artifact). Exactly one of Builtin and Command is
// set.
type Entrypoint struct {
	Builtin  string    `json:",omitempty"`
	Command  string    `json:",omitempty"`
	Args     []string  `json:",omitempty"`
	Artifact *Artifact `json:",omitempty"`
}

// Artifact is a file or archive Nomad downloads into the task directory
// before the command starts (go-getter syntax).
type Artifact struct {
	Source      string
	Destination string            `json:",omitempty"` // relative to the task dir; Nomad defaults to "local/"
	Mode        string            `json:",omitempty"` // "any", "file" or "dir"
	Options     map[string]string `json:",omitempty"`
}

// Scaling is how many workers run and what each needs, as in Ray's
// ScalingConfig.
type Scaling struct {
	// NumWorkers is the gang's size: the most workers, for an elastic
	// gang (num_workers = [min, max]), whose MinWorkers is the fewest it
	// trains with (0: a gang of a fixed size).
	NumWorkers         int
	MinWorkers         int `json:",omitempty"`
	UseGPU             bool
	ResourcesPerWorker Resources
	// TrainerResources is set when the spec has a trainer_resources block;
	// the compiled job then has a controller group with these resources.
	TrainerResources  *Resources `json:",omitempty"`
	PlacementStrategy string     // PlacementPack, PlacementSpread or PlacementStrictSpread
}

// Workers says how many workers the gang has, for people: "1 worker",
// "4 workers", or "2 to 4 workers" for an elastic gang.
func (s Scaling) Workers() string {
	if s.MinWorkers > 0 && s.MinWorkers < s.NumWorkers {
		return fmt.Sprintf("%d to %d workers", s.MinWorkers, s.NumWorkers)
	}
	return english.Count(s.NumWorkers, "worker", "workers")
}

// Resources is what one worker (or the controller) asks Nomad for.
type Resources struct {
	CPU      int `json:",omitempty"` // MHz; exclusive with Cores
	Cores    int `json:",omitempty"` // dedicated cores; exclusive with CPU
	MemoryMB int
	// GPU is the number of GPUs, requested in one device "nvidia/gpu" block.
	GPU int `json:",omitempty"`
	// GPUConstraints and GPUAffinities select GPUs by device attribute;
	// gpu_model is folded in as a ${device.model} constraint.
	GPUConstraints []DeviceConstraint `json:",omitempty"`
	GPUAffinities  []DeviceConstraint `json:",omitempty"`
}

// DeviceConstraint is one constraint or affinity on a GPU device. Attribute
// is already in Nomad's form, such as "${device.attr.memory}".
type DeviceConstraint struct {
	Attribute string
	Operator  string
	Value     string `json:",omitempty"`
	Weight    int    `json:",omitempty"` // affinities only, -100..100
}

// Run holds where results go and the checkpoint and failure policies, as in
// Ray's RunConfig.
type Run struct {
	// StoragePath is a local (or shared, mounted) directory, or an
	// s3://bucket/prefix URL; a file:// URL in the spec is turned into its
	// path. storage_path or the storage block's path sets it.
	StoragePath string
	Checkpoint  Checkpoint
	Failure     Failure
	// Storage is the storage block's object store options (the block's
	// path is StoragePath); nil when the spec has none.
	Storage *Storage `json:",omitempty"`
}

// Checkpoint is the checkpoint retention policy.
type Checkpoint struct {
	NumToKeep      int    // 0 keeps all
	ScoreAttribute string `json:",omitempty"`
	ScoreOrder     string // ScoreMax or ScoreMin
	// AsyncUpload: checkpoint uploads go on after Report returns (nil:
	// the runtime's default, on for s3:// storage paths).
	AsyncUpload *bool `json:",omitempty"`
	// Staging is where ranks build checkpoints before their upload to an
	// object store: workerenv.StagingDisk ("" too) or StagingMemory.
	Staging string `json:",omitempty"`
	// ResumeFrom is a checkpoint the run starts from while it has none
	// of its own (Ray's resume_from_checkpoint): an s3:// checkpoint
	// location (the run must be on S3 too, whose options and credentials
	// read it) or a checkpoint directory (a file:// URL in the spec is
	// turned into its path).
	ResumeFrom string `json:",omitempty"`
}

// Failure is the gang's failure budget.
type Failure struct {
	// MaxFailures is how many worker failures the run survives; 0 none, -1
	// unlimited.
	MaxFailures int
}

// Rendezvous configures how workers find each other.
type Rendezvous struct {
	// Backend is BackendEmbedded, BackendConsul, or "" for the default of the
	// place the run goes: embedded locally, consul on Nomad.
	Backend string `json:",omitempty"`
	// Address is the store's address when it is not the default one.
	Address string `json:",omitempty"`
	Timeout time.Duration
	// RejoinTimeout is how long a worker may stay out of a gang that is
	// re-forming before it is presumed hung (frozen, or stuck in its own
	// code) and replaced; 0 leaves it to the runtime (20 s, twice the
	// time in which a gang notices a frozen worker).
	RejoinTimeout time.Duration `json:",omitempty"`
	// ConsulOutageGrace is how long workers train on through a Consul
	// outage before they give their generation up (0: the workers'
	// default, 2m).
	ConsulOutageGrace time.Duration `json:",omitempty"`
	// Settle is how long an elastic gang that has its minimum waits for
	// more workers before it starts (0: the workers' default, 3s).
	Settle time.Duration `json:",omitempty"`
}

// BackendFor is the backend a run uses: the one the spec names, or else
// BackendConsul on Nomad and BackendEmbedded for a local run.
func (r Rendezvous) BackendFor(onNomad bool) string {
	switch {
	case r.Backend != "":
		return r.Backend
	case onNomad:
		return BackendConsul
	default:
		return BackendEmbedded
	}
}

// SHA256 is the hex SHA-256 of the spec's canonical JSON form: two specs
// with the same decoded settings have the same hash, whatever their
// formatting, comments or variable sources.
func (s *Spec) SHA256() string {
	b, err := json.Marshal(s)
	if err != nil {
		// Unreachable: a Spec holds only strings, integers, booleans, byte
		// slices, string maps and slices of those.
		panic("hcl: marshal spec: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
