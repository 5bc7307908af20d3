//go:build e2e

package driver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// TestE2EHostVolumeStorage runs a job with a host volume on a private
// Nomad dev agent (a nomad binary on PATH) whose client loads the plugin
// this test binary built: the task's storage_path lies under the
// volume_mount's destination, and the worker must write under the
// client's host_volume path instead. Before the driver took mounts, the
// client refused the task ("does not support host volumes").
func TestE2EHostVolumeStorage(t *testing.T) {
	nomadBin, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad binary on PATH: this test starts its own Nomad dev agent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	vol := filepath.Join(dir, "volume") // the client's host_volume path
	addr := startDevAgent(t, nomadBin, dir, vol)
	c, err := api.NewClient(&api.Config{Address: addr})
	must.NoError(t, err)
	waitDriverHealthy(ctx, t, c)

	jobID := fmt.Sprintf("nomad-train-e2e-volume-%d", time.Now().UnixNano())
	task := api.NewTask("worker", PluginName)
	task.Config = map[string]any{
		"command":      "/bin/sh",
		"args":         []string{"-c", `mkdir -p "$NOMAD_TRAIN_STORAGE_PATH/$NOMAD_TRAIN_RUN" && printf '%s\n%s\n' "$NOMAD_TRAIN_STORAGE_PATH" "$NOMAD_TRAIN_MOUNTS" > "$NOMAD_TRAIN_STORAGE_PATH/$NOMAD_TRAIN_RUN/probe"`},
		"launcher":     LauncherDirect,
		"run_name":     "e2e",
		"world_size":   1,
		"storage_path": "/mnt/shared/results",
	}
	task.Templates = []*api.Template{trainspec.SecretTemplate(jobID)}
	task.VolumeMounts = []*api.VolumeMount{{Volume: ptr("results"), Destination: ptr("/mnt/shared"), ReadOnly: ptr(false)}}
	_, _, err = c.Variables().Create(&api.Variable{Path: trainspec.SecretVariablePath(jobID),
		Items: api.VariableItems{trainspec.SecretItem: strings.Repeat("ab", trainspec.SecretHexLen/2)}}, nil)
	must.NoError(t, err)
	job := api.NewBatchJob(jobID, jobID, "global", 50)
	job.Datacenters = []string{"*"}
	tg := api.NewTaskGroup("workers", 1).AddTask(task)
	tg.Volumes = map[string]*api.VolumeRequest{"results": {Name: "results", Type: "host", Source: "train-results"}}
	tg.RestartPolicy = &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	job.AddTaskGroup(tg)
	_, _, err = c.Jobs().Register(job, nil)
	must.NoError(t, err)
	t.Cleanup(func() { _, _, _ = c.Jobs().Deregister(jobID, true, nil) })
	waitJobComplete(ctx, t, c, jobID)

	b, err := os.ReadFile(filepath.Join(vol, "results", "e2e", "probe"))
	must.NoError(t, err)
	want := filepath.Join(vol, "results") + "\n" +
		workerenv.EncodeMounts([]workerenv.Mount{{Destination: "/mnt/shared", HostPath: vol}}) + "\n"
	must.Eq(t, want, string(b))
}

// startDevAgent starts `nomad agent -dev` on free loopback ports with its
// data under dir, the plugin in its plugin_dir and the host volume
// "train-results" at vol, and stops it (and its process group) when the
// test ends. It returns the HTTP address.
func startDevAgent(t *testing.T, nomadBin, dir, vol string) string {
	t.Helper()
	plugins := filepath.Join(dir, "plugins")
	must.NoError(t, os.MkdirAll(plugins, 0o755))
	must.NoError(t, os.MkdirAll(vol, 0o755))
	must.NoError(t, os.Link(pluginBin, filepath.Join(plugins, PluginName)))
	var ports [3]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must.NoError(t, err)
		ports[i] = l.Addr().(*net.TCPAddr).Port
		must.NoError(t, l.Close())
	}
	cfg := fmt.Sprintf(`
data_dir   = %q
plugin_dir = %q
bind_addr  = "127.0.0.1"
ports {
  http = %d
  rpc  = %d
  serf = %d
}
client {
  enabled = true
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
  host_volume "train-results" {
    path = %q
  }
}
plugin "train" {
  config {}
}
`, filepath.Join(dir, "data"), plugins, ports[0], ports[1], ports[2], vol)
	cfgPath := filepath.Join(dir, "agent.hcl")
	must.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	must.NoError(t, err)
	cmd := exec.Command(nomadBin, "agent", "-dev", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		_ = logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("agent log:\n%s", b)
			}
		}
	})
	return fmt.Sprintf("http://127.0.0.1:%d", ports[0])
}

// waitDriverHealthy waits, with blocking queries, until a ready node
// reports the train driver healthy.
func waitDriverHealthy(ctx context.Context, t *testing.T, c *api.Client) {
	t.Helper()
	var index uint64
	for {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx)
		nodes, meta, err := c.Nodes().List(q)
		if err == nil {
			index = meta.LastIndex
			for _, n := range nodes {
				if d := n.Drivers[PluginName]; n.Status == api.NodeStatusReady && d != nil && d.Healthy {
					return
				}
			}
		} else if ctx.Err() == nil {
			select { // the agent is still starting its HTTP server
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no node with a healthy %s driver: %v (last error: %v)", PluginName, ctx.Err(), err)
		}
	}
}

// waitJobComplete waits until an allocation of jobID completes, and fails
// the test if one fails or is lost.
func waitJobComplete(ctx context.Context, t *testing.T, c *api.Client, jobID string) {
	t.Helper()
	var index uint64
	for {
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: 10 * time.Second}).WithContext(ctx)
		allocs, meta, err := c.Jobs().Allocations(jobID, true, q)
		must.NoError(t, err)
		index = meta.LastIndex
		for _, a := range allocs {
			switch a.ClientStatus {
			case api.AllocClientStatusComplete:
				return
			case api.AllocClientStatusFailed, api.AllocClientStatusLost:
				for name, ts := range a.TaskStates {
					for _, ev := range ts.Events {
						t.Logf("task %s: %s: %s", name, ev.Type, ev.DisplayMessage)
					}
				}
				t.Fatalf("allocation %s %s", a.ID, a.ClientStatus)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("job %s did not complete: %v", jobID, ctx.Err())
		}
	}
}
