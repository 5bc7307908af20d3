package driver

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/nomad-train/nomad-train/driver/executor"
	"github.com/nomad-train/nomad-train/driver/proto/hclspec"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// PluginConfig is the agent's plugin "train" { config { ... } } block.
type PluginConfig struct {
	// ConsulAddress is handed to workers whose rendezvous backend is
	// "consul" (as CONSUL_HTTP_ADDR), unless the task environment sets it.
	ConsulAddress string
	// ConsulToken is accepted for configs written when it was handed to
	// workers; it no longer reaches any task (workers get TaskConsulToken),
	// and the plugin itself calls no Consul.
	ConsulToken string
	// TaskConsulToken is handed to workers whose rendezvous backend is
	// "consul" (as CONSUL_HTTP_TOKEN), unless the task environment sets
	// one. Empty gives them none.
	TaskConsulToken string
	// AllowedCommandDirs limits command entrypoints to executables under
	// these directories. Empty allows any command.
	AllowedCommandDirs []string
	// DefaultUser runs tasks that name no user. Empty keeps the agent's user.
	DefaultUser string
	// DeniedUsers are users (names or uids) no task may run as; a task
	// asking for one is refused. The default denies root.
	DeniedUsers []string
	// GPUStats turns NVML fingerprinting and GPU task stats on.
	GPUStats bool
	// AllowUnauthenticated starts tasks whose secrets dir holds no run
	// secret; their workers then rendezvous and exchange gradients without
	// authentication. Off by default: such a task is refused (ErrNoSecret).
	AllowUnauthenticated bool
	// StatsInterval is the fingerprint refresh period and the default
	// TaskStats interval.
	StatsInterval time.Duration
}

// DefaultPluginConfig is the config of a plugin block without config {}.
func DefaultPluginConfig() PluginConfig {
	return PluginConfig{GPUStats: true, StatsInterval: 30 * time.Second, DeniedUsers: []string{"root"}}
}

// pluginConfigSpec is the schema of the plugin's config {} block.
func pluginConfigSpec() *hclspec.Spec {
	return specObject(map[string]*hclspec.Spec{
		"consul_address":        specAttr("consul_address", "string", false),
		"consul_token":          specAttr("consul_token", "string", false),
		"task_consul_token":     specAttr("task_consul_token", "string", false),
		"denied_users":          specDefault(specAttr("denied_users", "list(string)", false), `["root"]`),
		"allowed_command_dirs":  specAttr("allowed_command_dirs", "list(string)", false),
		"default_user":          specAttr("default_user", "string", false),
		"gpu_stats":             specDefault(specAttr("gpu_stats", "bool", false), "true"),
		"stats_interval":        specDefault(specAttr("stats_interval", "string", false), `"30s"`),
		"allow_unauthenticated": specDefault(specAttr("allow_unauthenticated", "bool", false), "false"),
	})
}

// DecodePluginConfig decodes SetConfig's msgpack_config.
func DecodePluginConfig(b []byte) (PluginConfig, error) {
	v, err := decodeMsgpack(pluginConfigSpec(), b)
	if err != nil {
		return PluginConfig{}, fmt.Errorf("decode plugin config: %w", err)
	}
	c := PluginConfig{
		ConsulAddress:        getString(v, "consul_address"),
		ConsulToken:          getString(v, "consul_token"),
		TaskConsulToken:      getString(v, "task_consul_token"),
		DeniedUsers:          getStrings(v, "denied_users"),
		AllowedCommandDirs:   getStrings(v, "allowed_command_dirs"),
		DefaultUser:          getString(v, "default_user"),
		GPUStats:             getBool(v, "gpu_stats"),
		AllowUnauthenticated: getBool(v, "allow_unauthenticated"),
	}
	for i, d := range c.AllowedCommandDirs {
		if !filepath.IsAbs(d) {
			return c, fmt.Errorf("decode plugin config: %w", fieldErr(fmt.Sprintf("allowed_command_dirs[%d]", i), "must be an absolute path, got %q", d))
		}
		c.AllowedCommandDirs[i] = filepath.Clean(d)
	}
	if c.StatsInterval, err = time.ParseDuration(getString(v, "stats_interval")); err != nil || c.StatsInterval <= 0 {
		return c, fmt.Errorf("decode plugin config: %w", fieldErr("stats_interval", "must be a positive duration such as \"30s\", got %q", getString(v, "stats_interval")))
	}
	if err := checkDefaultUser(c, executor.LookupUser); err != nil {
		return c, fmt.Errorf("decode plugin config: %w", err)
	}
	return c, nil
}

// TaskConfig is a task's config {} block.
type TaskConfig struct {
	Builtin string   // a training function built into the driver binary
	Command string   // or a program to run
	Args    []string // arguments of Command
	// Launcher says how Command runs: LauncherAuto (the default),
	// LauncherExternal or LauncherDirect.
	Launcher  string
	RunName   string
	WorldSize int
	// MinWorldSize, below WorldSize, makes the gang elastic (0: exactly
	// WorldSize).
	MinWorldSize int
	TrainConfig  string // JSON text
	StoragePath  string
	Port         string // network port label for collectives
	Rendezvous   RendezvousConfig
	Checkpoint   CheckpointConfig
	Failure      FailureConfig
	// Storage holds the non-secret options of an s3:// StoragePath (the
	// storage {} block); the workers' credentials come from their
	// environment, never from the task config.
	Storage workerenv.StorageOptions
}

// RunSpec is the run the task config describes (train.hcl's RunSpec,
// compiled): every worker's contract variables come from it.
func (c TaskConfig) RunSpec() workerenv.Run {
	return workerenv.Run{
		Name:        c.RunName,
		NumWorkers:  c.WorldSize,
		MinWorkers:  c.MinWorldSize,
		Settle:      c.Rendezvous.Settle,
		StoragePath: c.StoragePath,
		Storage:     c.Storage,
		Entrypoint:  workerenv.Entrypoint{Builtin: c.Builtin, Command: c.Command, Args: c.Args, Launcher: c.Launcher},
		Config:      json.RawMessage(c.TrainConfig),
		Checkpoint: workerenv.CheckpointPolicy{NumToKeep: c.Checkpoint.NumToKeep,
			ScoreAttribute: c.Checkpoint.ScoreAttribute, ScoreOrder: c.Checkpoint.ScoreOrder,
			AsyncUpload: c.Checkpoint.AsyncUpload, Staging: c.Checkpoint.Staging, ResumeFrom: c.Checkpoint.ResumeFrom},
		MaxFailures:       c.Failure.MaxFailures,
		RendezvousTimeout: c.Rendezvous.Timeout,
		ConsulOutageGrace: c.Rendezvous.ConsulOutageGrace,
	}
}

// RendezvousConfig is the task's rendezvous {} block.
type RendezvousConfig struct {
	Backend string // "consul" or "embedded"
	Address string // "embedded://host:port" for the embedded backend
	Timeout time.Duration
	// ConsulOutageGrace is how long workers train on through a Consul
	// outage (0: the workers' default).
	ConsulOutageGrace time.Duration
	// Settle is how long an elastic gang with its minimum waits for more
	// members before it starts (0: the workers' default).
	Settle time.Duration
}

// CheckpointConfig is the task's checkpoint {} block.
type CheckpointConfig struct {
	NumToKeep      int
	ScoreAttribute string
	ScoreOrder     string // "max", "min" or empty
	AsyncUpload    *bool  // nil: the runtime's default
	Staging        string // "disk", "memory" or empty
	ResumeFrom     string // a checkpoint to start from, or empty
}

// FailureConfig is the task's failure {} block.
type FailureConfig struct {
	MaxFailures int // -1 unlimited
}

// Launchers of a command entrypoint (workerenv's).
const (
	LauncherAuto     = workerenv.LauncherAuto
	LauncherExternal = workerenv.LauncherExternal
	LauncherDirect   = workerenv.LauncherDirect
)

// Rendezvous backends.
const (
	BackendConsul   = "consul"
	BackendEmbedded = "embedded"
)

// taskConfigSpec is the schema of a task's config {} block. It is the
// contract the spec compiler emits.
func taskConfigSpec() *hclspec.Spec {
	return specObject(map[string]*hclspec.Spec{
		"builtin":        specAttr("builtin", "string", false),
		"command":        specAttr("command", "string", false),
		"args":           specAttr("args", "list(string)", false),
		"launcher":       specDefault(specAttr("launcher", "string", false), `"auto"`),
		"run_name":       specAttr("run_name", "string", true),
		"world_size":     specAttr("world_size", "number", true),
		"min_world_size": specAttr("min_world_size", "number", false),
		"train_config":   specDefault(specAttr("train_config", "string", false), `"{}"`),
		"storage_path":   specAttr("storage_path", "string", true),
		"port":           specDefault(specAttr("port", "string", false), `"train"`),
		"storage": specBlock("storage", specObject(map[string]*hclspec.Spec{
			"endpoint":   specAttr("endpoint", "string", false),
			"region":     specAttr("region", "string", false),
			"path_style": specAttr("path_style", "bool", false),
		})),
		"rendezvous": specBlock("rendezvous", specObject(map[string]*hclspec.Spec{
			"backend":             specDefault(specAttr("backend", "string", false), `"consul"`),
			"address":             specAttr("address", "string", false),
			"timeout":             specDefault(specAttr("timeout", "string", false), `"5m"`),
			"consul_outage_grace": specAttr("consul_outage_grace", "string", false),
			"settle":              specAttr("settle", "string", false),
		})),
		"checkpoint": specBlock("checkpoint", specObject(map[string]*hclspec.Spec{
			"num_to_keep":     specAttr("num_to_keep", "number", false),
			"score_attribute": specAttr("score_attribute", "string", false),
			"score_order":     specAttr("score_order", "string", false),
			"async_upload":    specAttr("async_upload", "bool", false),
			"staging":         specAttr("staging", "string", false),
			"resume_from":     specAttr("resume_from", "string", false),
		})),
		"failure": specBlock("failure", specObject(map[string]*hclspec.Spec{
			"max_failures": specAttr("max_failures", "number", false),
		})),
	})
}

// DecodeTaskConfig decodes a task's msgpack_driver_config and checks the
// rules the schema cannot express. Errors name the field (*ConfigError).
func DecodeTaskConfig(b []byte) (TaskConfig, error) {
	tc, err := decodeTaskConfig(b)
	if err != nil {
		return tc, fmt.Errorf("decode task config: %w", err)
	}
	return tc, nil
}

func decodeTaskConfig(b []byte) (TaskConfig, error) {
	v, err := decodeMsgpack(taskConfigSpec(), b)
	if err != nil {
		return TaskConfig{}, err
	}
	tc := TaskConfig{
		Builtin:     getString(v, "builtin"),
		Command:     getString(v, "command"),
		Args:        getStrings(v, "args"),
		Launcher:    getString(v, "launcher"),
		RunName:     getString(v, "run_name"),
		TrainConfig: getString(v, "train_config"),
		StoragePath: getString(v, "storage_path"),
		Port:        getString(v, "port"),
		Rendezvous:  RendezvousConfig{Backend: BackendConsul, Timeout: 5 * time.Minute},
	}
	switch {
	case tc.Builtin == "" && tc.Command == "":
		return tc, fieldErr("command", "one of builtin or command is required")
	case tc.Builtin != "" && tc.Command != "":
		return tc, fieldErr("command", "builtin and command are mutually exclusive")
	case tc.Builtin == "" && len(tc.Args) > 0 && tc.Command == "":
		return tc, fieldErr("args", "args need a command")
	}
	if tc.Launcher == "" {
		tc.Launcher = LauncherAuto
	}
	if err := oneOf("launcher", tc.Launcher, LauncherAuto, LauncherExternal, LauncherDirect); err != nil {
		return tc, err
	}
	if tc.Builtin != "" && tc.Launcher != LauncherAuto {
		return tc, fieldErr("launcher", "applies to a command, not to builtin %q", tc.Builtin)
	}
	if strings.TrimSpace(tc.RunName) == "" {
		return tc, fieldErr("run_name", "must not be empty")
	}
	if strings.ContainsAny(tc.RunName, "/\\") || tc.RunName == "." || tc.RunName == ".." {
		return tc, fieldErr("run_name", "must be a plain name, got %q", tc.RunName)
	}
	ws, _, err := getInt(v, "world_size", "")
	if err != nil {
		return tc, err
	}
	if ws < 1 {
		return tc, fieldErr("world_size", "must be at least 1, got %d", ws)
	}
	tc.WorldSize = int(ws)
	if mws, has, err := getInt(v, "min_world_size", ""); err != nil {
		return tc, err
	} else if has && (mws < 1 || mws > ws) {
		return tc, fieldErr("min_world_size", "must be between 1 and world_size (%d), got %d", ws, mws)
	} else if has && mws < ws {
		tc.MinWorldSize = int(mws)
	}
	if tc.TrainConfig == "" {
		tc.TrainConfig = "{}"
	}
	if !json.Valid([]byte(tc.TrainConfig)) {
		return tc, fieldErr("train_config", "is not valid JSON")
	}
	if tc.StoragePath == "" {
		return tc, fieldErr("storage_path", "must not be empty")
	}
	if tc.Port == "" {
		tc.Port = "train"
	}
	if st := v.GetAttr("storage"); !st.IsNull() {
		tc.Storage = workerenv.StorageOptions{Endpoint: getString(st, "endpoint"),
			Region: getString(st, "region"), PathStyle: getBool(st, "path_style")}
	}
	if err := decodeRendezvous(v.GetAttr("rendezvous"), &tc.Rendezvous); err != nil {
		return tc, err
	}
	if err := decodeCheckpoint(v.GetAttr("checkpoint"), &tc.Checkpoint); err != nil {
		return tc, err
	}
	if f := v.GetAttr("failure"); !f.IsNull() {
		n, _, err := getInt(f, "max_failures", "failure")
		if err != nil {
			return tc, err
		}
		if n < -1 {
			return tc, fieldErr("failure.max_failures", "must be -1 (unlimited) or more, got %d", n)
		}
		tc.Failure.MaxFailures = int(n)
	}
	return tc, nil
}

func decodeRendezvous(r cty.Value, out *RendezvousConfig) error {
	if r.IsNull() {
		return nil
	}
	if b := getString(r, "backend"); b != "" {
		out.Backend = b
	}
	if err := oneOf("rendezvous.backend", out.Backend, BackendConsul, BackendEmbedded); err != nil {
		return err
	}
	out.Address = getString(r, "address")
	if out.Backend == BackendEmbedded {
		if out.Address == "" {
			return fieldErr("rendezvous.address", "the embedded backend needs an address (embedded://host:port)")
		}
		if !strings.HasPrefix(out.Address, "embedded://") {
			out.Address = "embedded://" + out.Address
		}
	}
	if t := getString(r, "timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return fieldErr("rendezvous.timeout", "must be a positive duration such as \"5m\", got %q", t)
		}
		out.Timeout = d
	}
	if t := getString(r, "consul_outage_grace"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return fieldErr("rendezvous.consul_outage_grace", "must be a positive duration such as \"2m\", got %q", t)
		}
		out.ConsulOutageGrace = d
	}
	if t := getString(r, "settle"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return fieldErr("rendezvous.settle", "must be a positive duration such as \"3s\", got %q", t)
		}
		out.Settle = d
	}
	return nil
}

func decodeCheckpoint(c cty.Value, out *CheckpointConfig) error {
	if c.IsNull() {
		return nil
	}
	n, _, err := getInt(c, "num_to_keep", "checkpoint")
	if err != nil {
		return err
	}
	if n < 0 {
		return fieldErr("checkpoint.num_to_keep", "must not be negative, got %d", n)
	}
	out.NumToKeep = int(n)
	out.ScoreAttribute = getString(c, "score_attribute")
	out.ScoreOrder = getString(c, "score_order")
	if a := c.GetAttr("async_upload"); !a.IsNull() && a.IsKnown() {
		on := a.True()
		out.AsyncUpload = &on
	}
	if out.ScoreOrder != "" {
		if err := oneOf("checkpoint.score_order", out.ScoreOrder, "max", "min"); err != nil {
			return err
		}
	}
	if out.Staging = getString(c, "staging"); out.Staging != "" {
		if err := oneOf("checkpoint.staging", out.Staging, workerenv.StagingDisk, workerenv.StagingMemory); err != nil {
			return err
		}
	}
	out.ResumeFrom = getString(c, "resume_from")
	return nil
}
