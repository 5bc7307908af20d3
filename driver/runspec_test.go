package driver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// The worker environment is produced in one place: for the same spec, a
// worker the driver starts on Nomad and a worker the local launcher starts
// on this machine get the same run settings. Only what belongs to the
// place differs (member, node, address, rendezvous endpoint, secret,
// events file, rank hint, the ports Nomad assigns, and the stop grace each
// place's kill timeout allows); everything else must be equal field for
// field.
func TestDriverAndLocalWorkersGetTheSameRun(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "examples", "*", "train.hcl"))
	must.NoError(t, err)
	for _, path := range paths {
		t.Run(filepath.Base(filepath.Dir(path)), func(t *testing.T) {
			spec, diags := trainspec.ParseFile(path, trainspec.ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			if spec.Tune != nil {
				t.Skip("an experiment: its trials are runs of their own")
			}
			job, diags := trainspec.Compile(spec)
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			task := job.TaskGroups[0].Tasks[0]

			r := &fakeRunner{}
			d := newTestDriver(t, nil, r)
			allocDir := t.TempDir()
			tcfg := fakeTaskConfig(t, allocDir, asClientDecodes(t, task.Config))
			if c := spec.Entrypoint.Command; c != "" && !filepath.IsAbs(c) {
				// What the artifact would hold: a Go trainer binary (this
				// test's own), which both places run directly.
				self, err := os.Executable()
				must.NoError(t, err)
				b, err := os.ReadFile(self)
				must.NoError(t, err)
				must.NoError(t, os.MkdirAll(filepath.Join(allocDir, "w", filepath.Dir(c)), 0o755))
				must.NoError(t, os.WriteFile(filepath.Join(allocDir, "w", c), b, 0o755))
			}
			// The client interpolates the job's env before the driver
			// sees it: the ports Nomad assigned.
			tcfg.Env["NOMAD_ADDR_metrics"] = "10.0.0.5:31001"
			tcfg.Env["NOMAD_PORT_torch"] = "31002"
			for k, v := range task.Env {
				tcfg.Env[k] = os.Expand(v, func(name string) string { return tcfg.Env[strings.Trim(name, "{}")] })
			}
			tcfg.DeviceEnv = nil
			_, err := inMemoryClient(t, d).StartTask(context.Background(), &drivers.StartTaskRequest{Task: tcfg})
			must.NoError(t, err)
			onNomad := loadEnv(t, r.started[0].Env)
			if spec.Entrypoint.Command != "" {
				must.EqOp(t, 31002, onNomad.TorchPort, must.Sprint("a command's MASTER_PORT is its Nomad port"))
			}

			// As Launch does: the run's Env on this machine, and what the
			// way of starting the worker adds (the builtin's name).
			rs := spec.RunSpec()
			proc, err := workerenv.StartFor(rs.Entrypoint, "/self", workerenv.SpeaksContract)
			must.NoError(t, err)
			local := loadEnv(t, append(launch.Options{Run: rs}.LocalEnv().Environ(), proc.Env...))
			place := func(e workerenv.Env) workerenv.Env {
				e.MemberID, e.Node, e.Addr, e.Rendezvous, e.SecretFile, e.Events, e.MetricsAddr = "", "", "", "", "", "", ""
				e.RankHint, e.StopGrace, e.TorchPort = -1, 0, 0
				return e
			}
			must.Eq(t, place(local), place(onNomad))
			must.EqOp(t, spec.Name, onNomad.RunName) // not two empty Envs
		})
	}
}

// loadEnv decodes KEY=VALUE pairs as a worker would.
func loadEnv(t *testing.T, kvs []string) workerenv.Env {
	t.Helper()
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	e, err := workerenv.Load(func(k string) string { return m[k] })
	must.NoError(t, err)
	return e
}

// asClientDecodes is a compiled task config as the Nomad client hands it
// to the driver: JSON values, each block (a list of one object in the job)
// an object.
func asClientDecodes(t *testing.T, cfg map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(cfg)
	must.NoError(t, err)
	var m map[string]any
	must.NoError(t, json.Unmarshal(b, &m))
	for k, v := range m {
		if l, ok := v.([]any); ok && len(l) == 1 {
			if obj, ok := l[0].(map[string]any); ok {
				m[k] = obj
			}
		}
	}
	return m
}
