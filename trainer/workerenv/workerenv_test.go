package workerenv

import (
	"testing"

	"github.com/shoenig/test/must"
)

// env is a getenv over a map.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestLoadCollectiveTransport(t *testing.T) {
	base := func(transport string) map[string]string {
		return map[string]string{RunName: "r", StoragePath: t.TempDir(), CollectiveTransport: transport}
	}
	for _, tc := range []struct {
		value string
		want  bool
	}{{"", false}, {"auto", false}, {"shm", false}, {"tcp", true}, {"TCP", true}} {
		t.Run(tc.value, func(t *testing.T) {
			e, err := Load(env(base(tc.value)))
			must.NoError(t, err)
			must.EqOp(t, tc.want, e.CollectiveTCPOnly)
		})
	}
	t.Run("a bad value names the variable", func(t *testing.T) {
		_, err := Load(env(base("udp")))
		must.ErrorContains(t, err, CollectiveTransport)
	})
}

func TestLoadFsync(t *testing.T) {
	for value, want := range map[string]bool{"": false, "records": false, "checkpoints": true} {
		e, err := Load(env(map[string]string{RunName: "r", StoragePath: "s", Fsync: value}))
		must.NoError(t, err)
		must.Eq(t, want, e.FsyncCheckpointsOnly)
	}
	_, err := Load(env(map[string]string{RunName: "r", StoragePath: "s", Fsync: "never"}))
	must.ErrorContains(t, err, Fsync)
}
