package trainspec

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestExamplesPassNomadRules: every example's compiled job, as Compile
// returns it and as `nomad-train compile -json` writes it, passes the job
// validation a Nomad server runs. examples/gpu (max_failures = -1) failed
// it: "Attempts = 1 ... and Unlimited = true is ambiguous".
func TestExamplesPassNomadRules(t *testing.T) {
	for _, rel := range examples(t) {
		t.Run(rel, func(t *testing.T) {
			spec, diags := ParseFile("../"+rel, ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
			var job *api.Job
			if spec.Tune != nil {
				job, diags = CompileTrial(spec, "trial_0001", "/mnt/results/"+spec.Name, []byte(`{}`))
			} else {
				job, diags = Compile(spec)
			}
			must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
			mustPassNomadRules(t, job)

			js, err := RenderJSON(job)
			must.NoError(t, err)
			var wrapped struct{ Job *api.Job }
			must.NoError(t, json.Unmarshal(js, &wrapped))
			mustPassNomadRules(t, wrapped.Job)
		})
	}
}

// TestFailureBudgetsPassNomadRules compiles the failure budgets a spec may
// give, including -1 (unlimited), and long run and experiment names.
func TestFailureBudgetsPassNomadRules(t *testing.T) {
	long := strings.Repeat("a", 55) + "z"
	for _, c := range []struct {
		name        string
		maxFailures int
		tune        bool
	}{
		{"r", -1, false}, {"r", 0, false}, {"r", 1, false}, {"r", 3, false},
		{"r", 1000, false}, {"r", 100000, false},
		{long, 2, false}, {long, -1, true}, {"exp", 2, true},
	} {
		t.Run(fmt.Sprintf("%s/%d/tune=%v", c.name[:1], c.maxFailures, c.tune), func(t *testing.T) {
			tune := ""
			if c.tune {
				tune = `tune { num_samples = 2 }`
				// a search space makes it an experiment
				tune += "\n  config = { lr = choice([0.1, 0.2]) }"
			}
			src := fmt.Sprintf(`
train %q {
  entrypoint { builtin = "quickstart" }
  scaling { num_workers = 2 }
  run {
    storage_path = "/mnt/results"
    failure { max_failures = %d }
  }
  %s
}
`, c.name, c.maxFailures, tune)
			spec, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
			var job *api.Job
			if c.tune {
				must.NotNil(t, spec.Tune)
				job, diags = CompileTrial(spec, "trial_0042", "/mnt/results/x", []byte(`{}`))
			} else {
				job, diags = Compile(spec)
			}
			must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
			mustPassNomadRules(t, job)
		})
	}
}

// TestNomadRulesCatch: the checker itself finds what a Nomad server
// refuses, so the tests above can fail.
func TestNomadRulesCatch(t *testing.T) {
	base := func() *api.Job {
		j := api.NewBatchJob("j", "j", "", 50)
		j.Region = nil // the agent's region
		j.Datacenters = []string{"dc1"}
		g := api.NewTaskGroup("g", 1)
		g.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "train"}}}}
		g.Services = []*api.Service{{Name: "j-worker", PortLabel: "train", Provider: "consul",
			Checks: []api.ServiceCheck{{Name: "c", Type: "tcp", Interval: 10 * time.Second, Timeout: 2 * time.Second}}}}
		g.Tasks = []*api.Task{api.NewTask("w", "train")}
		j.TaskGroups = []*api.TaskGroup{g}
		return j
	}
	mustPassNomadRules(t, base())
	cases := []struct {
		name string
		edit func(*api.Job)
		want string
	}{
		{"unlimited with attempts unset (defaults to 1)", func(j *api.Job) {
			j.TaskGroups[0].ReschedulePolicy = &api.ReschedulePolicy{Unlimited: new(true), DelayFunction: new("exponential"), MaxDelay: new(time.Minute)}
		}, "ambiguous"},
		{"reschedule delay below 5s", func(j *api.Job) {
			j.TaskGroups[0].ReschedulePolicy = &api.ReschedulePolicy{Attempts: new(2), Delay: new(time.Second)}
		}, "delay 1s is below"},
		{"reschedule attempts beyond interval", func(j *api.Job) {
			j.TaskGroups[0].ReschedulePolicy = &api.ReschedulePolicy{Attempts: new(10), Interval: new(30 * time.Second), Delay: new(5 * time.Second), DelayFunction: new("constant")}
		}, "do not fit"},
		{"exponential max_delay below delay", func(j *api.Job) {
			j.TaskGroups[0].ReschedulePolicy = &api.ReschedulePolicy{Attempts: new(0), Unlimited: new(true), Delay: new(time.Minute), DelayFunction: new("exponential"), MaxDelay: new(10 * time.Second)}
		}, "max_delay"},
		{"restart attempts beyond interval", func(j *api.Job) {
			j.TaskGroups[0].RestartPolicy = &api.RestartPolicy{Attempts: new(10), Interval: new(5 * time.Second), Delay: new(time.Second)}
		}, "do not fit in interval"},
		{"restart delay mode with 0 attempts", func(j *api.Job) {
			j.TaskGroups[0].RestartPolicy = &api.RestartPolicy{Attempts: new(0), Mode: new("delay")}
		}, "ambiguous"},
		{"restart mode unknown", func(j *api.Job) { j.TaskGroups[0].RestartPolicy = &api.RestartPolicy{Mode: new("never")} }, "unsupported mode"},
		{"negative count", func(j *api.Job) { j.TaskGroups[0].Count = new(-1) }, "negative"},
		{"negative shutdown delay", func(j *api.Job) { j.TaskGroups[0].ShutdownDelay = new(-time.Second) }, "shutdown_delay"},
		{"no driver", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Driver = "" }, "missing driver"},
		{"duplicate port label", func(j *api.Job) {
			j.TaskGroups[0].Networks = append(j.TaskGroups[0].Networks, &api.NetworkResource{DynamicPorts: []api.Port{{Label: "train"}}})
		}, "already in use"},
		{"service name with underscore", func(j *api.Job) { j.TaskGroups[0].Services[0].Name = "trial_0001-worker" }, "RFC 1123"},
		{"service name of 64 characters", func(j *api.Job) { j.TaskGroups[0].Services[0].Name = strings.Repeat("a", 64) }, "RFC 1123"},
		{"nomad provider with a grpc check", func(j *api.Job) {
			j.TaskGroups[0].Services[0].Provider = "nomad"
			j.TaskGroups[0].Services[0].Checks[0].Type = "grpc"
		}, "check type"},
		{"check interval below 1s", func(j *api.Job) { j.TaskGroups[0].Services[0].Checks[0].Interval = time.Millisecond }, "at least 1s"},
		{"cpu and cores", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Resources = &api.Resources{CPU: new(100), Cores: new(2)} }, "both cpu and cores"},
		{"memory below 10 MB", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Resources = &api.Resources{MemoryMB: new(5)} }, "below 10"},
		{"distinct_hosts on a task", func(j *api.Job) {
			j.TaskGroups[0].Tasks[0].Constraints = []*api.Constraint{api.NewConstraint("", "distinct_hosts", "true")}
		}, "only on a group"},
		{"no datacenters", func(j *api.Job) { j.Datacenters = []string{""} }, "datacenter"},
		{"volume of unknown type", func(j *api.Job) {
			j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{"v": {Name: "v", Type: "nfs", Source: "s"}}
		}, "unrecognized type"},
		{"CSI volume without modes", func(j *api.Job) {
			j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{"v": {Name: "v", Type: "csi", Source: "s"}}
		}, "attachment mode"},
		{"single-node-writer for many", func(j *api.Job) {
			j.TaskGroups[0].Count = new(3)
			j.TaskGroups[0].Volumes = map[string]*api.VolumeRequest{"v": {Name: "v", Type: "csi", Source: "s",
				AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
		}, "only one reader or writer"},
		{"mount of an undefined volume", func(j *api.Job) {
			j.TaskGroups[0].Tasks[0].VolumeMounts = []*api.VolumeMount{{Volume: new("v"), Destination: new("/mnt")}}
		}, "undefined volume"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := base()
			c.edit(j)
			errs := nomadRules(j)
			must.SliceNotEmpty(t, errs)
			must.StrContains(t, fmt.Sprint(errs), c.want)
		})
	}
}

func mustPassNomadRules(t *testing.T, job *api.Job) {
	t.Helper()
	errs := nomadRules(job)
	must.SliceEmpty(t, errs, must.Sprintf("%q", errs))
}
