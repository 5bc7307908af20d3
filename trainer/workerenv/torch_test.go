package workerenv

import (
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// The torchrun variables a worker needs are all there, with their values.
func TestTorchEnv(t *testing.T) {
	env := TorchEnv(Topology{MasterAddr: "10.0.0.1", MasterPort: 29500, Rank: 3, WorldSize: 4,
		LocalRank: 1, LocalWorldSize: 2, GroupRank: 1, GroupWorldSize: 2, RestartCount: 2, MaxRestarts: 5, RunID: "r"})
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for k, v := range map[string]string{
		"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": "3", "WORLD_SIZE": "4",
		"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
		"TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "5", "TORCHELASTIC_RUN_ID": "r",
	} {
		must.Eq(t, v, got[k], must.Sprint(k))
	}
}

// The variables only a launcher may set: the contract's own, save its
// tuning knobs, and torchrun's.
func TestReserved(t *testing.T) {
	for _, k := range []string{RunName, Builtin, ExternalCommand, SecretFile, "NOMAD_TRAIN_ANYTHING", "RANK", "MASTER_ADDR", "TORCHELASTIC_RUN_ID"} {
		must.True(t, Reserved(k), must.Sprint(k))
	}
	for _, k := range []string{StopGrace, CollectiveTransport, Fsync, MetricsAddr, TorchPort, "NOMAD_TRAIN_BLAS", "PATH", "LD_PRELOAD", "RANKING"} {
		must.False(t, Reserved(k), must.Sprint(k))
	}
}
