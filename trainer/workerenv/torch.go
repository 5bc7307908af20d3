package workerenv

import (
	"fmt"
	"slices"
	"strings"
)

// The torchrun contract: what a program run under ExternalBuiltin gets, as
// torchrun would give it, so that torch.distributed works unchanged.

// Topology is what the torchrun environment is made of.
type Topology struct {
	MasterAddr                string
	MasterPort                int
	Rank, WorldSize           int
	LocalRank, LocalWorldSize int
	GroupRank, GroupWorldSize int
	RestartCount, MaxRestarts int
	RunID                     string
}

// TorchEnv returns the variables torchrun gives each worker, so that
// torch.distributed.init_process_group("gloo"/"nccl") with the env://
// method works unchanged.
func TorchEnv(t Topology) []string {
	kv := func(k string, v any) string { return fmt.Sprintf("%s=%v", k, v) }
	return []string{
		kv("MASTER_ADDR", t.MasterAddr), kv("MASTER_PORT", t.MasterPort),
		kv("RANK", t.Rank), kv("WORLD_SIZE", t.WorldSize),
		kv("LOCAL_RANK", t.LocalRank), kv("LOCAL_WORLD_SIZE", t.LocalWorldSize),
		kv("GROUP_RANK", t.GroupRank), kv("GROUP_WORLD_SIZE", t.GroupWorldSize),
		kv("ROLE_RANK", t.Rank), kv("ROLE_WORLD_SIZE", t.WorldSize), kv("ROLE_NAME", "default"),
		kv("TORCHELASTIC_RESTART_COUNT", t.RestartCount), kv("TORCHELASTIC_MAX_RESTARTS", t.MaxRestarts),
		kv("TORCHELASTIC_RUN_ID", t.RunID),
	}
}

// TorchEnvNames are the names of the variables TorchEnv sets.
func TorchEnvNames() []string {
	kvs := TorchEnv(Topology{})
	names := make([]string, len(kvs))
	for i, kv := range kvs {
		names[i], _, _ = strings.Cut(kv, "=")
	}
	return names
}

// torchNames are the names TorchEnv sets.
var torchNames = TorchEnvNames()

// ValidName reports whether name can name a variable of a process's
// environment: not empty, and without "=" or NUL. A key "RANK=9" with the
// value "" would reach a process as RANK=9, past every check made by name.
func ValidName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "=\x00")
}

// Reserved reports whether only a launcher may set the variable name in a
// worker's environment: the worker contract (Prefix, save the tuning knobs
// TaskSettable allows) and the torchrun contract. A job that set them could
// run another program than the one its launcher let through, read another
// secret, or claim another rank.
func Reserved(name string) bool {
	if strings.HasPrefix(name, Prefix) {
		return !TaskSettable(name)
	}
	return slices.Contains(torchNames, name)
}
