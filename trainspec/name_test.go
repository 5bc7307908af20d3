package trainspec

import (
	"regexp"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// dnsLabel is an RFC 1123 label, what Nomad takes as a service name.
var dnsLabel = regexp.MustCompile(`^[a-z0-9A-Z]([a-z0-9A-Z-]{0,61}[a-z0-9A-Z])?$`)

// A run name may hold underscores, as a Nomad job ID may; the services it
// names still come out as DNS labels, with dashes in their place.
func TestRunNameWithUnderscore(t *testing.T) {
	long := strings.Repeat("a_b", 18) + "c_d" // 57 characters: too long
	cases := []struct {
		name     string
		job      string
		services []string
	}{
		{"my_run", "my_run", []string{"my-run-worker", "my-run-metrics"}},
		{"mixed", "a_b-c__d", []string{"a-b-c--d-worker", "a-b-c--d-metrics"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job, _ := mustCompile(t, "train \""+tc.job+"\" {\n  entrypoint { builtin = \"quickstart\" }\n}\n")
			must.EqOp(t, tc.job, *job.ID)
			must.EqOp(t, tc.job, job.Meta[MetaRun])
			var names []string
			for _, sv := range job.TaskGroups[0].Services {
				must.RegexMatch(t, dnsLabel, sv.Name)
				names = append(names, sv.Name)
			}
			must.Eq(t, tc.services, names)
		})
	}

	// Trials of an experiment with an underscore get DNS labels too.
	src := strings.Replace(tuneSpec, `train "qs-tune"`, `train "qs_tune"`, 1)
	spec, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	job, diags := CompileTrial(spec, "trial_0003", "/mnt/shared/results/qs_tune", []byte(`{"lr":0.01}`))
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	for _, sv := range job.TaskGroups[0].Services {
		must.RegexMatch(t, dnsLabel, sv.Name)
	}
	must.EqOp(t, "qs-tune-trial-0003-worker", job.TaskGroups[0].Services[0].Name)

	for _, bad := range []string{"_run", "run_", long, "my.run"} {
		_, diags := Parse([]byte("train \""+bad+"\" {\n  entrypoint { builtin = \"quickstart\" }\n}\n"), "train.hcl", ParseOptions{})
		must.True(t, diags.HasErrors(), must.Sprintf("name %q", bad))
	}
}
