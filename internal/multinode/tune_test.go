//go:build multinode

package multinode

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// tuneSpec is a tune of the quickstart on S3: three trials of two workers
// that rendezvous through Consul, two trials at a time.
func tuneSpec(storage string) string {
	return `
train "dt" {
  entrypoint { builtin = "quickstart" }
  config = {
    lr      = grid_search([0.1, 0.05, 0.02])
    epochs  = 3
    samples = 400
  }
  scaling {
    num_workers = 2
    resources_per_worker {
      cpu    = 100
      memory = 128
    }
  }
  rendezvous { backend = "consul" }
  run {
` + storage + `  }
  tune {
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
  }
}
`
}

// TestDetachedTune runs `tune -detach` on the cluster: the tuner is a
// Nomad job (raw_exec) on one client, reaching Nomad through its task API
// socket; it registers each trial as a job whose workers spread over the
// clients and rendezvous through their node's Consul agent, the keys to
// S3 coming from a Nomad Variable only (the agents have none in their
// environment). Midway the tuner is killed; Nomad restarts it, and the
// new one resumes. Every trial ends TERMINATED after its three epochs,
// its job having run once, each worker's services having been in its
// node's agent, and `status` prints the experiment.
func TestDetachedTune(t *testing.T) {
	const clients = 2
	b := newTestBed(t, clients, true)
	b.putKeys(t, "dt")
	s3, c, consul, bins := b.s3, b.c, b.consul, b.bins
	services := watchServices(t, consul)
	url := "s3://" + s3.Bucket + "/tune"
	spec := filepath.Join(b.base, "train.hcl")
	must.NoError(t, os.WriteFile(spec, []byte(tuneSpec(b.storageBlock(url))), 0o644))
	address := "http://" + c.server.http
	cli := func(args ...string) string {
		t.Helper()
		out, err := b.cli(nil, args...)
		must.NoError(t, err, must.Sprintf("nomad-train %s:\n%s", strings.Join(args, " "), out))
		return out
	}
	out := cli("tune", "-detach", "-address", address, "-tuner-driver", "raw_exec",
		"-tuner-command", bins.cli, "-tuner-consul-address", consul.clients[clientName(1)], spec)
	t.Logf("tune -detach:\n%s", out)
	must.StrContains(t, out, "job dt-tuner")

	// The test reads the experiment with the keys, as an operator would.
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	opts := []storage.Option{storage.WithStorageOptions(workerenv.StorageOptions{
		Endpoint: s3.Endpoint, Region: s3.Region, PathStyle: true})}
	ctx := context.Background()
	began := time.Now()

	// The tuner crashes (SIGKILL) once a trial runs: Nomad restarts it in
	// its allocation after the restart delay, and the new tuner takes the
	// experiment's lease at once, adopts the trials' jobs (running, or
	// finished meanwhile) and goes on.
	waitFor(t, 2*time.Minute, "a trial to run", func() (bool, error) {
		failIfJobFailed(t, c, "dt-tuner")
		s, ok, err := tune.LoadState(ctx, url+"/dt", opts...)
		return err == nil && ok && slices.ContainsFunc(s.Trials, func(tr *tune.TrialState) bool {
			return tr.Status == tune.StatusRunning
		}), nil
	})
	tuners := live(t, c, "dt-tuner")
	must.SliceLen(t, 1, tuners)
	alloc, _, err := c.api.Allocations().Info(tuners[0].ID, nil)
	must.NoError(t, err)
	must.NoError(t, c.api.Allocations().Signal(alloc, nil, tune.TunerTask, "SIGKILL"))
	t.Logf("TUNE: killed the tuner (alloc %s) %.1fs after the job was registered", alloc.ID[:8], time.Since(began).Seconds())

	var st *tune.ExperimentState
	waitFor(t, 6*time.Minute, "every trial to end", func() (bool, error) {
		failIfJobFailed(t, c, "dt-tuner")
		s, ok, err := tune.LoadState(ctx, url+"/dt", opts...)
		if err != nil || !ok || len(s.Trials) < 3 {
			return false, nil
		}
		for _, tr := range s.Trials {
			switch tr.Status {
			case tune.StatusTerminated, tune.StatusStopped, tune.StatusError:
			default:
				return false, nil
			}
		}
		st = s
		return true, nil
	})
	t.Logf("TUNE: %d trials ended %.1fs after the tuner's job was registered", len(st.Trials), time.Since(began).Seconds())
	for _, tr := range st.Trials {
		must.EqOp(t, tune.StatusTerminated, tr.Status, must.Sprintf("%s: %s", tr.ID, tr.Reason))
		must.EqOp(t, 3, tr.Iterations, must.Sprint(tr.ID))
		allocs, _, err := c.api.Jobs().Allocations("dt-"+tr.ID, true, nil)
		must.NoError(t, err)
		must.SliceLen(t, 2, allocs, must.Sprintf("%s ran its two workers once", tr.ID))
		for _, a := range allocs {
			must.EqOp(t, api.AllocClientStatusComplete, a.ClientStatus, must.Sprintf("%s alloc %s", tr.ID, a.ID[:8]))
			var names []string
			for _, s := range services.of(a.ID) {
				names = append(names, s.name)
				must.EqOp(t, a.NodeName, s.node, must.Sprintf("%s alloc %s's %s in its node's agent", tr.ID, a.ID[:8], s.name))
			}
			must.SliceLen(t, 2, names, must.Sprintf("%s alloc %s's services: %v", tr.ID, a.ID[:8], names))
		}
		t.Logf("TUNE: %s %s after %d epochs, loss %v; workers on %s", tr.ID, tr.Status, tr.Iterations,
			tr.LastResult["loss"], nodesOf(t, c, "dt-"+tr.ID))
	}
	waitFor(t, time.Minute, "the tuner's job to end", func() (bool, error) {
		job, _, err := c.api.Jobs().Info("dt-tuner", nil)
		return err == nil && *job.Status == "dead", nil
	})
	tuners, _, err = c.api.Jobs().Allocations("dt-tuner", true, nil)
	must.NoError(t, err)
	must.SliceLen(t, 1, tuners, must.Sprint("the tuner restarted in its allocation"))
	restarts := tuners[0].TaskStates[tune.TunerTask].Restarts
	must.Positive(t, restarts, must.Sprint("Nomad restarted the killed tuner"))
	t.Logf("TUNE: the tuner's allocation %s ended %s after %d restart(s)", tuners[0].ID[:8], tuners[0].ClientStatus, restarts)
	status := cli("status", "-address", address, "dt")
	t.Logf("status:\n%s", status)
	must.StrContains(t, status, "3 TERMINATED")
}

// nodesOf names the nodes of a job's allocations.
func nodesOf(t *testing.T, c *cluster, jobID string) []string {
	t.Helper()
	allocs, _, err := c.api.Jobs().Allocations(jobID, true, nil)
	must.NoError(t, err)
	var out []string
	for _, a := range allocs {
		out = append(out, a.NodeName)
	}
	return out
}

// TestPBTOnCluster tunes the quickstart with PBT, its trials Nomad jobs
// whose workers spread over the clients, its storage on S3 and the tuner
// on this machine. The trial whose learning rate is far too small is in
// the bottom quantile at a perturbation: its job is stopped, the server
// copies a better trial's latest checkpoint into its run, and its job,
// registered again with the donor's learning rate, resumes from that
// checkpoint. Every trial ends its eight epochs, and none is drawn back
// to a checkpoint it has cloned already.
// A trial that clones a checkpoint of its donor's last epoch has no epoch
// left to train: its last record is the clone's.
func TestPBTOnCluster(t *testing.T) {
	b := newTestBed(t, 2, false)
	b.putKeys(t, "pbt")
	url := "s3://" + b.s3.Bucket + "/tune"
	spec := filepath.Join(b.base, "train.hcl")
	src := strings.NewReplacer(`train "dt"`, `train "pbt"`,
		`lr      = grid_search([0.1, 0.05, 0.02])`, `lr      = grid_search([0.0000001, 0.1, 0.05])`,
		`epochs  = 3`, `epochs  = 8`, `samples = 400`, `samples = 200000`, // epochs of about a second
		`max_concurrent_trials = 2`, `max_concurrent_trials = 3
    scheduler {
      type                  = "pbt"
      perturbation_interval = 2
      hyperparam_mutations  = { lr = [0.1, 0.05] }
    }`).Replace(tuneSpec(b.storageBlock(url)))
	must.NoError(t, os.WriteFile(spec, []byte(src), 0o644))
	keys := []string{"AWS_ACCESS_KEY_ID=" + b.s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + b.s3.SecretKey}
	began := time.Now()
	out, err := b.cli(keys, "tune", "-address", "http://"+b.c.server.http, spec)
	must.NoError(t, err, must.Sprint(out))
	t.Logf("TUNE: %.1fs\n%s", time.Since(began).Seconds(), out)

	// status by the experiment's name, its tuner on this machine: its
	// trial jobs on Nomad, and its trial table from S3, read with the
	// options the trials' jobs carry (the environment holds the keys only).
	status, err := b.cli(keys, "status", "-address", "http://"+b.c.server.http, "pbt")
	must.NoError(t, err, must.Sprint(status))
	t.Logf("status:\n%s", status)
	must.StrContains(t, status, "experiment pbt: 3 trial jobs on Nomad (")
	must.StrContains(t, status, "== pbt: 3 trials (3 TERMINATED)")

	t.Setenv("AWS_ACCESS_KEY_ID", b.s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", b.s3.SecretKey)
	opts := []storage.Option{storage.WithStorageOptions(workerenv.StorageOptions{
		Endpoint: b.s3.Endpoint, Region: b.s3.Region, PathStyle: true})}
	st, ok, err := tune.LoadState(context.Background(), url+"/pbt", opts...)
	must.NoError(t, err)
	must.True(t, ok)
	exploits := 0
	for _, tr := range st.Trials {
		must.EqOp(t, tune.StatusTerminated, tr.Status, must.Sprintf("%s: %s", tr.ID, tr.Reason))
		f, err := storage.Follow(context.Background(), url+"/pbt", tr.ID, opts...)
		must.NoError(t, err)
		recs, _, err := f.NextRecords()
		f.Close()
		must.NoError(t, err)
		last := recs[len(recs)-1]
		must.EqOp(t, int64(8), last.Step, must.Sprintf("%s ended its last epoch", tr.ID))
		must.Eq[any](t, 7.0, last.Metrics["epoch"], must.Sprint(tr.ID))
		for _, x := range tr.Exploits {
			exploits++
			t.Logf("PBT: %s cloned %s at t=%v", tr.ID, x.Donor, x.Time)
		}
		t.Logf("PBT: %s ended at lr %v, loss %v; its last workers on %s", tr.ID, tr.Config["lr"], last.Metrics["loss"],
			nodesOf(t, b.c, "pbt-"+tr.ID))
	}
	must.Positive(t, exploits, must.Sprint(out))
	must.NotEq[any](t, 0.0000001, st.Trials[0].Config["lr"], must.Sprint("the worst trial explored away from its rate"))
}
