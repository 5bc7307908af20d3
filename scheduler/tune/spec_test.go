package tune

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestParseSpec(t *testing.T) {
	spec, space, cfg, err := ParseSpec([]byte(`{
  "name": "e", "builtin": "quickstart", "num_workers": 2,
  "config": {"lr": {"loguniform": [0.001, 0.1]}, "epochs": 9},
  "tune": {"num_samples": 8, "max_concurrent_trials": 2, "metric": "loss", "mode": "min",
    "time_budget": "90s", "seed": 4, "max_failures": 2,
    "scheduler": {"type": "pbt", "perturbation_interval": 2,
      "hyperparam_mutations": {"lr": {"loguniform": [0.001, 0.1]}, "batch_size": [16, 32]}}}}`))
	must.NoError(t, err)
	must.EqOp(t, 2, spec.NumWorkers)
	must.EqOp(t, "loguniform", space["lr"].(Domain).Kind())
	must.EqOp(t, 90*time.Second, cfg.TimeBudget)
	must.EqOp(t, 8, cfg.NumSamples)
	must.EqOp(t, SchedulerPBT, cfg.Scheduler.Type)
	must.EqOp(t, "loguniform", cfg.Scheduler.HyperparamMutations["lr"].(Domain).Kind())
	must.Eq(t, []any{16, 32}, cfg.Scheduler.HyperparamMutations["batch_size"].([]any))

	for _, tc := range []struct{ spec, err string }{
		{`{"builtin": "q"}`, "name is required"},
		{`{"name": "e"}`, "exactly one of builtin and command"},
		{`{"name": "e", "builtin": "q", "bogus": 1}`, "unknown field"},
		{`{"name": "e", "builtin": "q", "config": {"lr": {"uniform": [2, 1]}}}`, "lower bound"},
		{`{"name": "e", "builtin": "q", "tune": {"metric": "loss"}}`, "metric and mode go together"},
		{`{"name": "e", "builtin": "q", "tune": {"metric": "loss", "mode": "up"}}`, "mode must be"},
		{`{"name": "e", "builtin": "q", "tune": {"time_budget": "soon"}}`, "time_budget"},
		{`{"name": "e", "builtin": "q", "tune": {"scheduler": {"type": "hyperband"}}}`, "unknown scheduler"},
		{`{"name": "e", "builtin": "q", "tune": {"scheduler": {"type": "asha"}}}`, "needs a metric"},
		{`{"name": "e", "builtin": "q", "tune": {"metric": "l", "mode": "min", "scheduler": {"type": "pbt"}}}`, "hyperparam_mutations is empty"},
		{`{"name": "e", "builtin": "q", "tune": {"metric": "l", "mode": "min", "scheduler": {"type": "asha", "reduction_factor": 1}}}`, "reduction_factor"},
	} {
		_, _, _, err := ParseSpec([]byte(tc.spec))
		must.ErrorContains(t, err, tc.err, must.Sprint(tc.spec))
	}
}

// FuzzParseSpec: no input makes the spec decoder panic, and a spec it
// accepts has a param space the generator can sample.
func FuzzParseSpec(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"name":"e","builtin":"q","config":{"a":{"grid_search":[1,2]},"b":[{"randint":[0,3]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, space, cfg, err := ParseSpec(data)
		if err != nil {
			return
		}
		gen, err := NewGenerator(space, cfg.Searcher, min(cfg.NumSamples, 3), cfg.Seed)
		if err != nil {
			if !strings.Contains(err.Error(), "searcher") {
				t.Fatal(err)
			}
			return
		}
		for i := 0; i < min(gen.Total(), 50); i++ {
			if _, ok := gen.Next(); !ok {
				t.Fatalf("generator ended after %d of %d", i, gen.Total())
			}
		}
	})
}
