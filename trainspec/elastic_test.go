package trainspec

import (
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func elasticSpec(numWorkers string) string {
	return fmt.Sprintf(`train "el" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_workers = %s
  }
  rendezvous { settle = "5s" }
}
`, numWorkers)
}

// num_workers = [min, max] is an elastic gang: the run and the compiled
// job ask for max, the workers learn min; a number stays a fixed gang.
func TestElasticNumWorkers(t *testing.T) {
	cases := []struct {
		src      string
		min, max int
	}{
		{"[2, 4]", 2, 4},
		{"[3, 3]", 0, 3}, // min = max: a fixed gang
		{"4", 0, 4},
		{"[1, 8]", 1, 8},
	}
	for _, tc := range cases {
		t.Run(tc.src, func(t *testing.T) {
			s := mustParse(t, elasticSpec(tc.src), ParseOptions{})
			must.Eq(t, tc.max, s.Scaling.NumWorkers)
			must.Eq(t, tc.min, s.Scaling.MinWorkers)
			run := s.RunSpec()
			must.Eq(t, tc.max, run.NumWorkers)
			must.Eq(t, 5*time.Second, run.Settle)
			env := run.WorkerEnv()
			must.Eq(t, tc.min, env.MinWorldSize)

			job, diags := Compile(s)
			must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
			must.Eq(t, tc.max, *job.TaskGroups[0].Count)
			cfg := job.TaskGroups[0].Tasks[0].Config
			if tc.min > 0 {
				must.Eq[any](t, tc.min, cfg["min_world_size"])
			} else {
				_, has := cfg["min_world_size"]
				must.False(t, has)
			}
		})
	}
}

// A bad num_workers is an error at its line.
func TestElasticNumWorkersErrors(t *testing.T) {
	const usage = "num_workers is a number, or [min, max] for an elastic gang (such as [2, 4])"
	cases := []struct {
		src, want string
	}{
		{"[4, 2]", usage + "; min (4) is above max (2)."},
		{"[0, 2]", usage + "; its min must be a whole number from 1 to 2147483647, got 0."},
		{"[2, 2.5]", usage + "; its max must be a whole number from 1 to 2147483647, got 2.5."},
		{"[1, 1e10]", usage + "; its max must be a whole number from 1 to 2147483647, got 1e+10."},
		{"[2]", usage + "; got 1 values."},
		{"[1, 2, 3]", usage + "; got 3 values."},
		{`["a", 2]`, usage + "; its min is not a number."},
		{"0", "num_workers must be at least 1; got 0."},
	}
	for _, tc := range cases {
		t.Run(tc.src, func(t *testing.T) {
			_, diags := Parse([]byte(elasticSpec(tc.src)), "train.hcl", ParseOptions{})
			must.SliceLen(t, 1, diags, must.Sprint(diagLines(diags)))
			end := 19 + len(tc.src)
			must.Eq(t, fmt.Sprintf("train.hcl:4:19-4:%d: error: Invalid value; %s", end, tc.want), diagLines(diags)[0])
		})
	}
}
