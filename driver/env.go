package driver

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/trainer/external"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/storeuri"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Environment variable names the driver reads or sets besides workerenv's.
const (
	envNvidiaVisible = "NVIDIA_VISIBLE_DEVICES"
	envCudaVisible   = "CUDA_VISIBLE_DEVICES"
	envAllocIndex    = "NOMAD_ALLOC_INDEX"
	envConsulAddr    = "CONSUL_HTTP_ADDR"
	envConsulToken   = "CONSUL_HTTP_TOKEN"
	// secretFileName is the run secret's file in the task's secrets dir.
	secretFileName = "nomad-train.secret"
	// eventsFileName is the runtime's events file in the task's local dir.
	eventsFileName = "nomad-train-events.jsonl"
)

// taskPaths are the host paths of a task's directories (fs_isolation NONE).
type taskPaths struct {
	TaskDir, LocalDir, SecretsDir, PrivateDir string
}

func pathsOf(tc *drivers.TaskConfig) taskPaths {
	dir := filepath.Join(tc.GetAllocDir(), tc.GetName())
	return taskPaths{
		TaskDir:    dir,
		LocalDir:   filepath.Join(dir, "local"),
		SecretsDir: filepath.Join(dir, "secrets"),
		PrivateDir: filepath.Join(dir, "private"),
	}
}

// taskEnviron is the environment Nomad gives the task, as KEY=VALUE
// pairs, before the driver adds its own.
func taskEnviron(tc *drivers.TaskConfig) []string {
	env := make([]string, 0, len(tc.GetEnv()))
	for k, v := range tc.GetEnv() {
		env = append(env, k+"="+v)
	}
	return env
}

// envInput is everything workerEnv needs, gathered so it stays a pure
// function.
type envInput struct {
	Task        *drivers.TaskConfig
	Config      TaskConfig
	Plugin      PluginConfig
	Paths       taskPaths
	SecretFound bool // the secrets dir holds secretFileName
	// Process is how the worker starts (workerenv.StartFor). When it is
	// the driver binary (Self: a builtin, or the wrapper of External), the
	// job's variables that withheldFromSelf names are kept from it, and
	// handed on to External's command.
	Process     workerenv.Process
	HostName    string
	NodeHasGPUs bool
	// Mounts are the task's volumes and where the worker finds them
	// (taskMounts), handed on in workerenv.Mounts.
	Mounts []workerenv.Mount
}

// workerEnv is the task's environment: Nomad's task env plus the runtime's
// NOMAD_TRAIN_* variables and GPU visibility. It returns KEY=VALUE pairs,
// sorted.
//
// The driver's values win: the job's own values of reserved variables
// (isReservedEnv; StartTask refuses a job that sets them) are dropped.
func workerEnv(in envInput) []string {
	env := make(map[string]string, len(in.Task.GetEnv())+20)
	held := map[string]string{}
	take := func(k, v string) {
		switch _, set := env[k]; {
		case set || isReservedEnv(k):
		case in.Process.Self && withheldFromSelf(k):
			held[k] = v
		default:
			env[k] = v
		}
	}
	for k, v := range in.Task.GetEnv() {
		take(k, v)
	}
	for k, v := range in.Task.GetDeviceEnv() {
		take(k, v)
	}
	// The contract variables come from the run the task config describes,
	// through workerenv, as a local launch's do; what is Nomad's is the
	// place: the member, node, address, rendezvous, secret and events.
	c := in.Config
	we := c.RunSpec().WorkerEnv()
	if idx, err := strconv.Atoi(env[envAllocIndex]); err == nil {
		we.RankHint = idx
	}
	// Rendezvous member IDs may not hold a slash (they are key path parts).
	we.MemberID = in.Task.GetAllocId() + "." + in.Task.GetName()
	we.Node = in.Task.GetNodeName()
	if we.Node == "" {
		we.Node = in.HostName
	}
	we.Addr = collectiveAddr(env, c.Port)
	switch c.Rendezvous.Backend {
	case BackendEmbedded:
		we.Rendezvous = c.Rendezvous.Address
	default:
		we.Rendezvous = storeuri.NomadJobURI(in.Task.GetNamespace(), in.Task.GetJobId())
		if _, ok := env[envConsulAddr]; !ok && in.Plugin.ConsulAddress != "" {
			env[envConsulAddr] = in.Plugin.ConsulAddress
		}
		if _, ok := env[envConsulToken]; !ok && in.Plugin.TaskConsulToken != "" {
			env[envConsulToken] = in.Plugin.TaskConsulToken
		}
	}
	we.Mounts = in.Mounts
	we.Events = filepath.Join(in.Paths.LocalDir, eventsFileName)
	if in.SecretFound {
		we.SecretFile = filepath.Join(in.Paths.SecretsDir, secretFileName)
	}
	for _, kvs := range [][]string{we.Environ(), in.Process.Env} {
		for _, kv := range kvs {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	if in.Process.External != nil {
		if len(held) > 0 {
			b, _ := json.Marshal(held) // a map[string]string always encodes
			env[external.HeldEnv] = string(b)
		}
	}
	// GPU visibility: with no container, NVIDIA_VISIBLE_DEVICES alone hides
	// nothing, so CUDA gets the reservation too. A task without a GPU
	// reservation on a GPU node sees none. A task sees its own GPUs only,
	// numbered from 0 whatever its LOCAL_RANK: LocalDevice says so.
	if _, ok := env[envCudaVisible]; !ok {
		if gpus := visibleGPUs(in.Task); len(gpus) > 0 {
			env[envCudaVisible] = strings.Join(gpus, ",")
			env[workerenv.LocalDevice] = "0"
		} else if in.NodeHasGPUs && env[envNvidiaVisible] == "" {
			env[envCudaVisible] = ""
			env[envNvidiaVisible] = "void"
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// collectiveAddr is host:port of the task's port label, from Nomad's
// NOMAD_ADDR_<label> (labels with dashes appear with underscores).
func collectiveAddr(env map[string]string, label string) string {
	for _, k := range []string{"NOMAD_ADDR_" + label, "NOMAD_ADDR_" + strings.ReplaceAll(label, "-", "_")} {
		if v := env[k]; v != "" {
			return v
		}
	}
	return "127.0.0.1:0"
}

// withheldIn names the variables of the job's env that workerEnv keeps
// from the driver binary.
func withheldIn(tc *drivers.TaskConfig) []string {
	var names []string
	for _, m := range []map[string]string{tc.GetEnv(), tc.GetDeviceEnv()} {
		for k := range m {
			if withheldFromSelf(k) && !slices.Contains(names, k) {
				names = append(names, k)
			}
		}
	}
	sort.Strings(names)
	return names
}
