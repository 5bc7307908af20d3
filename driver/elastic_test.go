package driver

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// An elastic gang's task config: min_world_size and the settle time reach
// the run every worker's environment comes from.
func TestDecodeElasticTaskConfig(t *testing.T) {
	cfg := func(min any, settle string) map[string]any {
		c := map[string]any{"command": "/bin/true", "run_name": "r", "world_size": 4, "storage_path": "/data",
			"rendezvous": map[string]any{"settle": settle}}
		if min != nil {
			c["min_world_size"] = min
		}
		return c
	}
	tc, err := DecodeTaskConfig(mustEncodeTaskConfig(t, cfg(2, "5s")))
	must.NoError(t, err)
	run := tc.RunSpec()
	must.Eq(t, 2, run.MinWorkers)
	must.Eq(t, 5*time.Second, run.Settle)
	must.Eq(t, 2, run.WorkerEnv().MinWorldSize)

	tc, err = DecodeTaskConfig(mustEncodeTaskConfig(t, cfg(4, "1s")))
	must.NoError(t, err)
	must.Eq(t, 0, tc.MinWorldSize) // min = max: a fixed gang

	for _, bad := range []struct {
		min    any
		settle string
		field  string
	}{
		{5, "1s", "min_world_size"},
		{0, "1s", "min_world_size"},
		{2, "soon", "rendezvous.settle"},
	} {
		_, err := DecodeTaskConfig(mustEncodeTaskConfig(t, cfg(bad.min, bad.settle)))
		must.ErrorContains(t, err, bad.field)
	}
}
