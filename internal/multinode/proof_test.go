//go:build multinode

package multinode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	nomadrun "github.com/nomad-train/nomad-train/scheduler/nomad"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// The run: the quickstart on four workers, reporting and checkpointing
// every epoch (100 steps of 32 samples), with enough epochs that a node
// is lost between its first checkpoint and its end.
const (
	runName    = "multinode"
	numWorkers = 4
	numClients = 3
	epochs     = 60
	samples    = 3200
)

func spec(storagePath string, consul bool) string {
	rendezvous := ""
	if consul {
		rendezvous = `rendezvous { backend = "consul" }`
	}
	return fmt.Sprintf(`
train %q {
  entrypoint { builtin = "quickstart" }
  config = {
    epochs     = %d
    samples    = %d
    batch_size = 32
  }
  scaling {
    num_workers        = %d
    placement_strategy = "SPREAD"
    resources_per_worker {
      cpu    = 100
      memory = 128
    }
  }
  %s
  run {
    storage_path = %q
    checkpoint { num_to_keep = 2 }
    failure { max_failures = 3 }
  }
}
`, runName, epochs, samples, numWorkers, rendezvous, storagePath)
}

// TestNodeLoss is the multi-node proof (see the package documentation).
func TestNodeLoss(t *testing.T) {
	nomadBin := needNomad(t)
	s3 := s3test.Start(t)
	base := t.TempDir()
	bins := buildBinaries(t, base)
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s3.SecretKey,
		"AWS_REGION": s3.Region, "AWS_ENDPOINT_URL_S3": s3.Endpoint,
		"AWS_CONFIG_FILE": filepath.Join(base, "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(base, "none"),
	} {
		t.Setenv(k, v)
	}
	want := referenceRun(t, bins.cli, base)

	consul := startConsul(t, base, numClients)
	c := startCluster(t, nomadBin, bins.driver, base, consul, numClients, false)
	storagePath := "s3://" + s3.Bucket + "/runs"
	job, varPath := clusterJob(t, base, storagePath, s3)
	services := watchServices(t, consul)
	_, _, err := c.api.Variables().Create(&api.Variable{Path: varPath,
		Items: api.VariableItems{trainspec.S3AccessKeyItem: s3.AccessKey, trainspec.S3SecretKeyItem: s3.SecretKey}}, nil)
	must.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	nc, err := nomadrun.NewClient(nomadrun.Config{Address: "http://" + c.server.http})
	must.NoError(t, err)
	sub, err := nomadrun.SubmitAttempt(ctx, nc, job, nomadrun.AttemptOptions{StoragePath: storagePath, Run: runName})
	must.NoError(t, err)
	t.Cleanup(func() { _, _, _ = c.api.Jobs().Deregister(sub.JobID, true, nil) })
	started := time.Now()
	t.Logf("submitted job %s: %d workers of the quickstart, %d epochs, storage %s", sub.JobID, numWorkers, epochs, storagePath)

	// Wait for the first checkpoint on S3, then lose the client that runs
	// the most workers.
	progress, err := storage.OpenStoreReadOnly(ctx, storagePath, runName, storage.Policy{})
	must.NoError(t, err)
	defer progress.Close()
	var lastBefore storage.Record
	waitFor(t, 5*time.Minute, "the first checkpoint on S3", func() (bool, error) {
		failIfJobFailed(t, c, sub.JobID)
		recs, err := progress.Records()
		if err != nil {
			return false, nil
		}
		for _, r := range recs {
			if r.Checkpoint != "" {
				lastBefore = r
			}
		}
		return lastBefore.Checkpoint != "", nil
	})
	// Every worker has joined (a checkpoint was made), though the server
	// may not have heard from every client that its task runs yet.
	var allocs []*api.AllocationListStub
	ranks := map[string]string{} // allocation ID to the rank its worker has
	waitFor(t, time.Minute, "the rank of every worker", func() (bool, error) {
		allocs = live(t, c, sub.JobID)
		for _, a := range allocs {
			if evs, err := allocEvents(c, a.ID); err == nil {
				if ev, ok := lastEventOf(evs, "rendezvous_complete"); ok {
					ranks[a.ID] = ev.Attrs["rank"]
				}
			}
		}
		return len(allocs) == numWorkers && len(ranks) == numWorkers, nil
	})
	victim := chooseVictim(t, allocs, ranks)
	va := c.client(victim)
	var lost []string
	for _, a := range allocs {
		if a.NodeName == victim {
			lost = append(lost, fmt.Sprintf("%s (rank %s)", a.ID[:8], ranks[a.ID]))
		}
	}
	tKill := time.Now()
	pids := killMachine(va.marker)
	t.Logf("NODE LOSS at %s (%.1fs into the run, after %s at step %d): killed %s (agent pid %d and %d processes: %v), which ran allocs %v",
		stamp(tKill), tKill.Sub(started).Seconds(), lastBefore.Checkpoint, lastBefore.Step, victim, va.cmd.Process.Pid, len(pids), pids, lost)
	victimID := nodeID(t, c, victim)

	// Nomad marks the node down and places the lost workers elsewhere.
	var tDownSeen time.Time
	waitFor(t, 2*time.Minute, "the server to mark "+victim+" down", func() (bool, error) {
		n, _, err := c.api.Nodes().Info(victimID, nil)
		if err == nil && n.Status == api.NodeStatusDown {
			tDownSeen = time.Now()
			return true, nil
		}
		return false, nil
	})
	tDown := nodeDownEvent(t, c, victimID, tKill, tDownSeen)
	// The gang is broken until the replacements join: the latest
	// checkpoint now (the newest with a manifest: its record may not be
	// written yet) is the one the run must resume from.
	recs, err := progress.Records()
	must.NoError(t, err)
	before := lastCheckpoint(recs)
	latest := newestManifest(t, s3, "runs/"+runName+"/checkpoints/")
	t.Logf("NODE DOWN: %s marked down at %s (+%.2fs after the loss; seen by the test at +%.2fs)",
		victim, stamp(tDown), tDown.Sub(tKill).Seconds(), tDownSeen.Sub(tKill).Seconds())

	var replacements []*api.Allocation
	waitFor(t, 8*time.Minute, "the run to finish", func() (bool, error) {
		failIfJobFailed(t, c, sub.JobID)
		job, _, err := c.api.Jobs().Info(sub.JobID, nil)
		return err == nil && *job.Status == "dead", nil
	})
	services.stop()
	replacements = replacementsOf(t, c, sub.JobID, victimID, tKill)
	must.SliceLen(t, len(lost), replacements, must.Sprint("one replacement for each lost worker"))
	for _, r := range replacements {
		st := r.TaskStates[trainspec.WorkerTask]
		t.Logf("RESCHEDULE: alloc %s replaces %s on %s: placed at %s (+%.2fs), worker started at %s (+%.2fs)",
			r.ID[:8], shortID(r.PreviousAllocation), r.NodeName, stamp(time.Unix(0, r.CreateTime)),
			time.Unix(0, r.CreateTime).Sub(tKill).Seconds(), stamp(st.StartedAt), st.StartedAt.Sub(tKill).Seconds())
		must.NotEq(t, victim, r.NodeName)
	}

	// The run resumed from the latest checkpoint written before the loss,
	// and ended where a fault-free run ends, bit for bit.
	final, err := storage.OpenStoreReadOnly(ctx, storagePath, runName, storage.Policy{})
	must.NoError(t, err)
	defer final.Close()
	recs, err = final.Records()
	must.NoError(t, err)
	events := readEvents(t, c, sub.JobID, victimID)
	restored, ok := firstEvent(events, "checkpoint_restored", tKill)
	must.True(t, ok, must.Sprint("rank 0 of the new gang restored a checkpoint"))
	must.Eq(t, latest, restored.Attrs["checkpoint"], must.Sprint("the run resumed from the latest checkpoint on S3"))
	resumed, ok := firstAfter(recs, before.Generation)
	must.True(t, ok, must.Sprintf("no report after generation %d: %+v", before.Generation, recs))
	t.Logf("RESUMED: restored %s (step %s) at %s (+%.2fs); the first report after the loss is step %d (generation %d, epoch %v) at %s (+%.2fs)",
		restored.Attrs["checkpoint"], restored.Attrs["step"], stamp(restored.Time), restored.Time.Sub(tKill).Seconds(),
		resumed.Step, resumed.Generation, resumed.Metrics["epoch"], stamp(resumed.Time), resumed.Time.Sub(tKill).Seconds())
	must.Eq(t, restored.Attrs["step"], fmt.Sprint(resumed.Step-1), must.Sprint("the run goes on from the step after the restored checkpoint"))
	steps := map[int64]int{}
	for _, r := range recs {
		steps[r.Step]++
	}
	for s, n := range steps {
		must.Eq(t, 1, n, must.Sprintf("step %d reported %d times in the history", s, n))
	}
	got := finalCheckpoint(t, final)
	must.Eq(t, want.files, got.files, must.Sprint("the final parameters (every file of the last checkpoint) equal the fault-free run's, bit for bit"))
	must.Eq(t, want.loss, got.loss)
	t.Logf("FINAL: %s at step %d, loss %v: the same %d files (sha256) and loss as the fault-free run", got.name, got.step, got.loss, len(got.files))

	logSplit(t, split{kill: tKill, down: tDown, replacements: replacements, events: events, resumed: resumed})
	checkServices(t, c, consul, services, allocs, replacements, victim)
}

// checkServices: every worker's two services (its collective port and
// its metrics) were registered by its node's Nomad client in that node's
// Consul agent, with its check (which the agent runs every 10 s, the
// first staggered over that: a worker of this short run may end before
// its first, so passing is logged, not required); and once the run
// ended, the surviving clients deregistered them all.
func checkServices(t *testing.T, c *cluster, consul consulAgents, w *serviceWatch,
	first []*api.AllocationListStub, replacements []*api.Allocation, victim string) {
	t.Helper()
	type ran struct{ id, node string }
	var all []ran
	for _, a := range first {
		all = append(all, ran{a.ID, a.NodeName})
	}
	for _, a := range replacements {
		all = append(all, ran{a.ID, a.NodeName})
	}
	want := []string{runName + "-metrics", runName + "-worker"}
	for _, a := range all {
		seen := w.of(a.id)
		var names []string
		for _, s := range seen {
			names = append(names, s.name)
			if !consul.real { // a real dev agent is every client's
				must.Eq(t, a.node, s.node, must.Sprintf("alloc %s's %s is in its own node's agent", a.id[:8], s.name))
			}
			must.Eq(t, 1, s.checks, must.Sprintf("alloc %s's %s has its check", a.id[:8], s.name))
		}
		must.Eq(t, want, names, must.Sprintf("alloc %s's services", a.id[:8]))
		passing := "not seen passing"
		if !seen[0].passing.IsZero() {
			passing = "checks passing at " + stamp(seen[0].passing)
		}
		t.Logf("CONSUL: alloc %s on %s: %v registered at %s, %s",
			a.id[:8], a.node, names, stamp(seen[0].registered), passing)
	}
	if consul.real {
		return // one agent for every client: the lost node's services stay in it
	}
	for node, addr := range consul.clients {
		if node == victim {
			continue // its agent was not lost with it here: what it holds is stale
		}
		waitFor(t, time.Minute, "the services of "+node+" to be deregistered", func() (bool, error) {
			return len(registeredIn(t, addr)) == 0, nil
		})
	}
	t.Logf("CONSUL: the surviving clients deregistered every service of the run")
}

// binaries are the ones the proof builds from this module.
type binaries struct{ driver, cli string }

func buildBinaries(t *testing.T, base string) binaries {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	must.NoError(t, err)
	b := binaries{driver: filepath.Join(base, "bin", "nomad-driver-train"), cli: filepath.Join(base, "bin", "nomad-train")}
	for pkg, out := range map[string]string{"./cmd/nomad-driver-train": b.driver, "./cmd/nomad-train": b.cli} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return b
}

// result is what a run ended with: its last checkpoint's files (path to
// SHA-256) and loss.
type result struct {
	name  string
	step  int64
	files map[string]string
	loss  any
}

// referenceRun runs the same spec without faults on this machine (the
// embedded default: local processes, local storage).
func referenceRun(t *testing.T, cli, base string) result {
	t.Helper()
	dir := filepath.Join(base, "reference")
	must.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "train.hcl")
	must.NoError(t, os.WriteFile(path, []byte(spec(filepath.Join(dir, "results"), false)), 0o644))
	cmd := exec.Command(cli, "run", "-local", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	began := time.Now()
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprintf("the fault-free run:\n%s", out))
	st, err := storage.OpenStoreReadOnly(context.Background(), filepath.Join(dir, "results"), runName, storage.Policy{})
	must.NoError(t, err)
	defer st.Close()
	r := finalCheckpoint(t, st)
	t.Logf("fault-free local run: %.1fs, %s at step %d, loss %v", time.Since(began).Seconds(), r.name, r.step, r.loss)
	return r
}

// finalCheckpoint reads the run's latest checkpoint (from S3: downloaded
// and checked against its manifest) and the loss of its report.
func finalCheckpoint(t *testing.T, st storage.RunStore) result {
	t.Helper()
	latest, err := st.LatestIntact()
	must.NoError(t, err)
	must.True(t, latest.OK, must.Sprint("the run has a checkpoint"))
	must.Eq[any](t, float64(epochs-1), latest.Record.Metrics["epoch"], must.Sprint("the last checkpoint is the last epoch's"))
	files := map[string]string{}
	err = filepath.WalkDir(latest.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == storage.ManifestFile {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(latest.Path, p)
		sum := sha256.Sum256(b)
		files[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	must.NoError(t, err)
	must.MapNotEmpty(t, files)
	return result{name: latest.Name, step: latest.Record.Step, files: files, loss: latest.Record.Metrics["loss"]}
}

// clusterJob compiles the spec for the cluster and adds what this test
// bed needs: S3 credentials rendered from a Nomad Variable (never in the
// job), the S3 endpoint, and a temporary directory of each task's own
// (the clients share this machine's /tmp, which machines would not).
func clusterJob(t *testing.T, base, storagePath string, s3 *s3test.Server) (*api.Job, string) {
	t.Helper()
	path := filepath.Join(base, "train.hcl")
	must.NoError(t, os.WriteFile(path, []byte(spec(storagePath, true)), 0o644))
	s, diags := trainspec.ParseFile(path, trainspec.ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	job, diags := trainspec.Compile(s)
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	task := job.TaskGroups[0].Tasks[0]
	task.Env["AWS_ENDPOINT_URL_S3"] = s3.Endpoint
	task.Env["AWS_REGION"] = s3.Region
	task.Env["AWS_CONFIG_FILE"] = "/nonexistent"
	task.Env["AWS_SHARED_CREDENTIALS_FILE"] = "/nonexistent"
	task.Env["TMPDIR"] = "${NOMAD_TASK_DIR}"
	// The compiled job reads the keys from a Variable itself (a second
	// template of ours at the same destination is refused by Nomad).
	must.True(t, slices.ContainsFunc(task.Templates, func(tp *api.Template) bool {
		return tp.DestPath != nil && *tp.DestPath == trainspec.S3CredentialsFile
	}), must.Sprint("the compiled job renders S3 keys from a Variable"))
	return job, trainspec.S3CredentialsVariablePath(*job.ID)
}

// live lists the job's allocations that have not ended.
func live(t *testing.T, c *cluster, jobID string) []*api.AllocationListStub {
	t.Helper()
	allocs, _, err := c.api.Jobs().Allocations(jobID, true, nil)
	must.NoError(t, err)
	var out []*api.AllocationListStub
	for _, a := range allocs {
		if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending {
			out = append(out, a)
		}
	}
	return out
}

// loseEnv chooses the node the proof loses: "rank0" (the default) is the
// node of rank 0, which holds the run's S3 writer lease; "other" is the
// busiest node without it.
const loseEnv = "MULTINODE_LOSE"

// chooseVictim is the node to lose among those running allocs (ranks
// maps an allocation to its worker's rank), as loseEnv says.
func chooseVictim(t *testing.T, allocs []*api.AllocationListStub, ranks map[string]string) string {
	t.Helper()
	rank0 := ""
	count := map[string]int{}
	for _, a := range allocs {
		count[a.NodeName]++
		if ranks[a.ID] == "0" {
			rank0 = a.NodeName
		}
	}
	switch os.Getenv(loseEnv) {
	case "", "rank0":
		if rank0 == "" {
			t.Fatalf("no running worker has rank 0: ranks %v", ranks)
		}
		return rank0
	case "other":
		names := make([]string, 0, len(count))
		for n := range count {
			if n != rank0 {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		best := ""
		for _, n := range names {
			if best == "" || count[n] > count[best] {
				best = n
			}
		}
		if best == "" {
			t.Fatalf("every running worker is on rank 0's node %s", rank0)
		}
		return best
	default:
		t.Fatalf("%s=%q: want rank0 or other", loseEnv, os.Getenv(loseEnv))
		return ""
	}
}

func nodeID(t *testing.T, c *cluster, name string) string {
	t.Helper()
	nodes, _, err := c.api.Nodes().List(nil)
	must.NoError(t, err)
	for _, n := range nodes {
		if n.Name == name {
			return n.ID
		}
	}
	t.Fatalf("no node %s", name)
	return ""
}

// nodeDownEvent is when the server marked the node down after the kill,
// from its node events; seen when it has no such event. A node of a
// loaded machine may have missed a heartbeat before (and come back):
// that event is not this one.
func nodeDownEvent(t *testing.T, c *cluster, id string, kill, seen time.Time) time.Time {
	t.Helper()
	n, _, err := c.api.Nodes().Info(id, nil)
	must.NoError(t, err)
	for _, ev := range n.Events {
		if strings.Contains(strings.ToLower(ev.Message), "heartbeat missed") && !ev.Timestamp.Before(kill) {
			return ev.Timestamp
		}
	}
	return seen
}

// failIfJobFailed ends the test at once when a worker allocation failed.
func failIfJobFailed(t *testing.T, c *cluster, jobID string) {
	t.Helper()
	allocs, _, err := c.api.Jobs().Allocations(jobID, true, nil)
	if err != nil {
		return
	}
	for _, a := range allocs {
		if a.ClientStatus == api.AllocClientStatusFailed {
			full, _, _ := c.api.Allocations().Info(a.ID, nil)
			msg := ""
			if full != nil {
				for _, ts := range full.TaskStates {
					for _, ev := range ts.Events {
						msg += fmt.Sprintf("\n  %s: %s %s", ev.Type, ev.DisplayMessage, ev.Details)
					}
				}
			}
			t.Fatalf("allocation %s on %s failed:%s", a.ID[:8], a.NodeName, msg)
		}
	}
}

// replacementsOf are the allocations Nomad placed after the loss in place
// of those on the lost node.
func replacementsOf(t *testing.T, c *cluster, jobID, lostNode string, after time.Time) []*api.Allocation {
	t.Helper()
	stubs, _, err := c.api.Jobs().Allocations(jobID, true, nil)
	must.NoError(t, err)
	var out []*api.Allocation
	for _, s := range stubs {
		if s.NodeID == lostNode || time.Unix(0, s.CreateTime).Before(after) {
			continue
		}
		a, _, err := c.api.Allocations().Info(s.ID, nil)
		must.NoError(t, err)
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *api.Allocation) int { return int(a.CreateTime - b.CreateTime) })
	return out
}

// newestManifest is the newest checkpoint under prefix that has a
// manifest, which is what makes a checkpoint exist.
func newestManifest(t *testing.T, srv *s3test.Server, prefix string) string {
	t.Helper()
	out, err := srv.Client(t).ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &srv.Bucket, Prefix: &prefix})
	must.NoError(t, err)
	newest := ""
	for _, o := range out.Contents {
		name, file, ok := strings.Cut(strings.TrimPrefix(*o.Key, prefix), "/")
		if ok && file == storage.ManifestFile && name > newest {
			newest = name
		}
	}
	must.NotEq(t, "", newest, must.Sprint("a checkpoint with a manifest"))
	return newest
}

// lastCheckpoint is the last record that committed a checkpoint.
func lastCheckpoint(recs []storage.Record) storage.Record {
	var last storage.Record
	for _, r := range recs {
		if r.Checkpoint != "" {
			last = r
		}
	}
	return last
}

// firstAfter is the first record of a generation after gen.
func firstAfter(recs []storage.Record, gen uint64) (storage.Record, bool) {
	for _, r := range recs {
		if r.Generation > gen {
			return r, true
		}
	}
	return storage.Record{}, false
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }
