package trainspec

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func mustCompile(t *testing.T, src string) (*api.Job, []string) {
	t.Helper()
	job, diags := Compile(mustParse(t, src, ParseOptions{}))
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	return job, diagLines(diags)
}

// TestTaskConfigContract pins the driver's config exactly (see the driver's
// schema): names, types and the list-of-one-map form of blocks.
func TestTaskConfigContract(t *testing.T) {
	job, warnings := mustCompile(t, `train "contract" {
  entrypoint {
    command = "local/bin/train"
    args    = ["-v", "2"]
  }
  config = { lr = 0.1 }
  scaling { num_workers = 3 }
  run {
    storage_path = "/data/runs"
    checkpoint {
      num_to_keep     = 4
      score_attribute = "loss"
      score_order     = "min"
      async_upload    = false
    }
    failure { max_failures = 2 }
  }
  rendezvous {
    backend = "consul"
    address = "127.0.0.1:8500"
    timeout = "90s"
  }
}`)
	must.SliceEmpty(t, warnings)
	must.Len(t, 1, job.TaskGroups)
	g := job.TaskGroups[0]
	must.Eq(t, WorkerGroup, *g.Name)
	must.Eq(t, 3, *g.Count)
	must.Len(t, 1, g.Tasks)
	task := g.Tasks[0]
	must.Eq(t, "train", task.Driver)
	must.Eq(t, map[string]any{
		"command":      "local/bin/train",
		"args":         []string{"-v", "2"},
		"run_name":     "contract",
		"world_size":   3,
		"train_config": `{"lr":0.1}`,
		"storage_path": "/data/runs",
		"port":         "train",
		"rendezvous":   []map[string]any{{"backend": "consul", "address": "127.0.0.1:8500", "timeout": "1m30s"}},
		"checkpoint":   []map[string]any{{"num_to_keep": 4, "score_attribute": "loss", "score_order": "min", "async_upload": false}},
		"failure":      []map[string]any{{"max_failures": 2}},
	}, task.Config)
	// A command gets torchrun's environment: its MASTER_PORT is the
	// task's port "torch" (a builtin's group has none: the goldens).
	must.Eq(t, []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "train"}, {Label: "metrics"}, {Label: "torch"}}}}, g.Networks)
	must.Eq(t, "${NOMAD_PORT_torch}", task.Env["NOMAD_TRAIN_TORCH_PORT"])
	must.Len(t, 2, g.Services)
	must.Eq(t, "contract-metrics", g.Services[1].Name)
	must.Eq(t, "metrics", g.Services[1].PortLabel)
	must.Eq(t, []string{"prometheus", "metrics_path=/metrics", "nomad-train", "run=contract"}, g.Services[1].Tags)
	must.Eq(t, "${NOMAD_ADDR_metrics}", task.Env["NOMAD_TRAIN_METRICS_ADDR"])
	must.Eq(t, "contract-worker", g.Services[0].Name)
	must.Eq(t, "train", g.Services[0].PortLabel)
	must.Eq(t, "consul", g.Services[0].Provider)
	must.Eq(t, "batch", *job.Type)
	must.Eq(t, map[string]string{
		MetaRun:         "contract",
		MetaStoragePath: "/data/runs",
		MetaSpecSHA256:  job.Meta[MetaSpecSHA256],
	}, job.Meta)
	must.Eq(t, 64, len(job.Meta[MetaSpecSHA256]))
}

func TestFailurePolicies(t *testing.T) {
	cases := []struct {
		maxFailures string
		restart     api.RestartPolicy
		reschedule  api.ReschedulePolicy
	}{
		{"0",
			api.RestartPolicy{Attempts: new(0), Interval: new(24 * time.Hour), Delay: new(time.Second), Mode: new("fail")},
			api.ReschedulePolicy{Attempts: new(0), Interval: new(24 * time.Hour), Delay: new(5 * time.Second), DelayFunction: new("constant"), Unlimited: new(false)}},
		{"3",
			api.RestartPolicy{Attempts: new(3), Interval: new(24 * time.Hour), Delay: new(time.Second), Mode: new("fail")},
			api.ReschedulePolicy{Attempts: new(3), Interval: new(24 * time.Hour), Delay: new(5 * time.Second), DelayFunction: new("constant"), Unlimited: new(false)}},
		{"100000", // more attempts than fit in a day at the delay: the interval grows
			api.RestartPolicy{Attempts: new(100000), Interval: new(100000 * time.Second), Delay: new(time.Second), Mode: new("fail")},
			api.ReschedulePolicy{Attempts: new(100000), Interval: new(500000 * time.Second), Delay: new(5 * time.Second), DelayFunction: new("constant"), Unlimited: new(false)}},
		{"-1",
			api.RestartPolicy{Attempts: new(10), Interval: new(10 * time.Minute), Delay: new(time.Second), Mode: new("delay")},
			api.ReschedulePolicy{Attempts: new(0), Delay: new(5 * time.Second), DelayFunction: new("exponential"), MaxDelay: new(time.Minute), Unlimited: new(true)}},
	}
	for _, tc := range cases {
		t.Run(tc.maxFailures, func(t *testing.T) {
			job, _ := mustCompile(t, `train "f" {
  entrypoint { builtin = "quickstart" }
  run {
    failure { max_failures = `+tc.maxFailures+` }
  }
}`)
			g := job.TaskGroups[0]
			must.Eq(t, tc.restart, *g.RestartPolicy)
			must.Eq(t, tc.reschedule, *g.ReschedulePolicy)
			// Nomad's validation: attempts × delay fit in the interval; reschedule delay ≥ 5 s.
			if r := g.RestartPolicy; *r.Mode == "fail" {
				must.LessEq(t, *r.Interval, time.Duration(*r.Attempts)**r.Delay)
			}
			must.GreaterEq(t, 5*time.Second, *g.ReschedulePolicy.Delay)
		})
	}
}

func TestPlacement(t *testing.T) {
	spec := func(strategy string) string {
		return `train "p" {
  entrypoint { builtin = "quickstart" }
  scaling { placement_strategy = "` + strategy + `" }
}`
	}
	job, _ := mustCompile(t, spec(PlacementPack))
	must.SliceEmpty(t, job.TaskGroups[0].Spreads)
	must.SliceEmpty(t, job.TaskGroups[0].Constraints)

	job, _ = mustCompile(t, spec(PlacementSpread))
	must.Eq(t, []*api.Spread{{Attribute: "${node.unique.id}", Weight: new(int8(100))}}, job.TaskGroups[0].Spreads)

	job, _ = mustCompile(t, spec(PlacementStrictSpread))
	must.Eq(t, []*api.Constraint{{Operand: "distinct_hosts", RTarget: "true"}}, job.TaskGroups[0].Constraints)
}

// TestOneGPUDevice wants every GPU setting in one device "nvidia/gpu" block
// (Nomad mis-handles several).
func TestOneGPUDevice(t *testing.T) {
	job, _ := mustCompile(t, `train "gpu" {
  entrypoint { builtin = "quickstart" }
  scaling {
    use_gpu = true
    resources_per_worker {
      gpu       = 4
      gpu_model = "H100"
      gpu_constraint {
        attribute = "memory"
        operator  = ">="
        value     = "40 GiB"
      }
      gpu_constraint {
        attribute = "vendor"
        value     = "nvidia"
      }
    }
  }
}`)
	devs := job.TaskGroups[0].Tasks[0].Resources.Devices
	must.Len(t, 1, devs)
	must.Eq(t, "nvidia/gpu", devs[0].Name)
	must.Eq(t, uint64(4), *devs[0].Count)
	must.Eq(t, []*api.Constraint{
		{LTarget: "${device.model}", Operand: "=", RTarget: "H100"},
		{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "40 GiB"},
		{LTarget: "${device.vendor}", Operand: "=", RTarget: "nvidia"},
	}, devs[0].Constraints)
}

func TestTrainerResourcesWarn(t *testing.T) {
	job, diags := mustCompile(t, `train "ctl" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_workers = 2
    trainer_resources { cpu = 250 }
  }
}`)
	must.Len(t, 1, job.TaskGroups)
	must.StrContains(t, strings.Join(diags, "\n"), "trainer_resources reserve nothing on Nomad")

	job, _ = mustCompile(t, minimal)
	must.Len(t, 1, job.TaskGroups)
}

func TestEmbeddedRendezvousOnNomad(t *testing.T) {
	job, warnings := mustCompile(t, `train "e" {
  entrypoint { builtin = "quickstart" }
  rendezvous { backend = "embedded" }
  run { storage_path = "/r" }
}`)
	must.Eq(t, []string{
		`train.hcl:3:16-3:36: warning: Embedded rendezvous without an address; On Nomad, workers reach the embedded rendezvous store only at an address; set rendezvous.address, or use backend = "consul".`,
	}, warnings)
	must.Eq(t, "nomad", job.TaskGroups[0].Services[0].Provider)

	job, warnings = mustCompile(t, `train "e" {
  entrypoint { builtin = "quickstart" }
  rendezvous {
    backend = "embedded"
    address = "10.0.0.1:4000"
  }
  run { storage_path = "/r" }
}`)
	must.SliceEmpty(t, warnings)
	must.Eq(t, "embedded", job.TaskGroups[0].Tasks[0].Config["rendezvous"].([]map[string]any)[0]["backend"])
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Second: "1s", 90 * time.Second: "1m30s", 5 * time.Minute: "5m",
		24 * time.Hour: "24h", 90 * time.Minute: "1h30m0s", 1500 * time.Millisecond: "1.5s",
	} {
		must.Eq(t, want, FormatDuration(d))
		back, err := time.ParseDuration(want)
		must.NoError(t, err)
		must.Eq(t, d, back)
	}
}

// TestCanonicalizeKeepsPolicies runs nomad/api's client-side Canonicalize
// (what the Nomad CLI does before registering) over every example and wants
// our explicit settings to survive Nomad's defaults.
func TestCanonicalizeKeepsPolicies(t *testing.T) {
	for _, rel := range examples(t) {
		t.Run(rel, func(t *testing.T) {
			job := compileExample(t, rel)
			want := compileExample(t, rel)
			job.Canonicalize()
			must.Eq(t, *want.ID, *job.ID)
			must.Eq(t, "batch", *job.Type)
			for i, g := range job.TaskGroups {
				w := want.TaskGroups[i]
				must.Eq(t, *w.Count, *g.Count)
				wr, gr := w.RestartPolicy, g.RestartPolicy
				must.Eq(t, []any{*wr.Attempts, *wr.Interval, *wr.Delay, *wr.Mode}, []any{*gr.Attempts, *gr.Interval, *gr.Delay, *gr.Mode})
				must.Eq(t, *w.ReschedulePolicy.Delay, *g.ReschedulePolicy.Delay)
				must.Eq(t, *w.ReschedulePolicy.Unlimited, *g.ReschedulePolicy.Unlimited)
				must.Eq(t, w.Tasks[0].Config, g.Tasks[0].Config)
				must.Eq(t, w.Tasks[0].Resources.Devices, g.Tasks[0].Resources.Devices)
			}
		})
	}
}

func TestRelativeStorageWarning(t *testing.T) {
	_, warnings := mustCompile(t, minimal)
	must.Eq(t, []string{
		`train.hcl:2:1-2:13: warning: Relative storage path on Nomad; On Nomad, storage_path "./results" resolves inside each allocation's directory: workers do not share it, and it goes when the allocation is collected. Use a directory every client mounts, such as "/mnt/shared/results".`,
	}, warnings)
	_, warnings = mustCompile(t, `train "w" {
  entrypoint { builtin = "quickstart" }
  run { storage_path = "file:///mnt/nfs/runs" }
}`)
	must.SliceEmpty(t, warnings)
	// Every worker reaches an S3 storage path: no warning, and the job
	// carries it as written.
	job, warnings := mustCompile(t, `train "w" {
  entrypoint { builtin = "quickstart" }
  run { storage_path = "s3://bucket/runs" }
}`)
	must.SliceEmpty(t, warnings)
	must.Eq(t, "s3://bucket/runs", job.Meta[MetaStoragePath])
}

// TestSecretTemplate: the worker task renders the run secret from the job's
// Variable, and SecretCommand is a shell line that stores a fresh one there
// (run here with a stand-in nomad that prints its arguments).
func TestSecretTemplate(t *testing.T) {
	job, _ := mustCompile(t, `train "sec" {
  entrypoint { builtin = "quickstart" }
  run { storage_path = "/data/runs" }
}`)
	task := job.TaskGroups[0].Tasks[0]
	must.Len(t, 1, task.Templates)
	tp := task.Templates[0]
	must.Eq(t, `{{ with nomadVar "nomad/jobs/sec" }}{{ .secret }}{{ end }}`, *tp.EmbeddedTmpl)
	must.Eq(t, "secrets/nomad-train.secret", *tp.DestPath)
	must.Eq(t, "restart", *tp.ChangeMode)
	must.Eq(t, "0400", *tp.Perms)

	bin := t.TempDir()
	// A stand-in nomad that prints its arguments, a "key=-" one with the
	// value it reads from stdin, as nomad var put does.
	fake := `#!/bin/sh
for a; do
  case "$a" in
  *=-) printf '%s=%s\n' "${a%=-}" "$(cat)" ;;
  *) printf '%s\n' "$a" ;;
  esac
done
`
	must.NoError(t, os.WriteFile(filepath.Join(bin, "nomad"), []byte(fake), 0o755))
	cases := []struct {
		name, ns, region string
		wantArgs         []string
	}{
		{name: "plain", wantArgs: []string{"var", "put", "nomad/jobs/sec"}},
		{name: "namespace and region", ns: "ml team", region: "eu", wantArgs: []string{"var", "put", "-region", "eu", "-namespace", "ml team", "nomad/jobs/sec"}},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := *job
			j.Namespace, j.Region = &tc.ns, &tc.region
			line := SecretCommand(&j)
			must.StrNotContains(t, line, "$(", must.Sprint("the secret stays off command lines"))
			cmd := exec.Command("/bin/sh", "-c", line)
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			must.NoError(t, err, must.Sprint(string(out)))
			args := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			must.Eq(t, tc.wantArgs, args[:len(args)-1])
			item, secret, ok := strings.Cut(args[len(args)-1], "=")
			must.True(t, ok)
			must.Eq(t, SecretItem, item)
			must.RegexMatch(t, regexp.MustCompile(`^[0-9a-f]{64}$`), secret)
			must.False(t, seen[secret], must.Sprint("a fresh secret each time"))
			seen[secret] = true
		})
	}
}
