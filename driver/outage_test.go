package driver

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestDecodeConsulOutageGrace(t *testing.T) {
	cfg := func(grace string) map[string]any {
		return map[string]any{"command": "/bin/true", "run_name": "r", "world_size": 2, "storage_path": "/data",
			"rendezvous": map[string]any{"consul_outage_grace": grace}}
	}
	tc, err := DecodeTaskConfig(mustEncodeTaskConfig(t, cfg("45s")))
	must.NoError(t, err)
	must.Eq(t, 45*time.Second, tc.Rendezvous.ConsulOutageGrace)
	for _, bad := range []string{"soon", "0s"} {
		_, err := DecodeTaskConfig(mustEncodeTaskConfig(t, cfg(bad)))
		must.ErrorContains(t, err, "rendezvous.consul_outage_grace")
	}
}
