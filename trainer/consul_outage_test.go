package trainer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// outageFlag is a file whose existence the parent test uses to tell the
// workers of an outage test that they may finish.
const outageFlag = "OUTAGE_TEST_FLAG"

// outageTrain steps until any rank sees the flag file, then 20 steps
// more (the ranks agree through the all-reduce), reporting every step.
func outageTrain(ctx context.Context, s *trainer.Session) error {
	buf := make([]float64, 1)
	finishAt := int64(-1)
	for step := int64(1); finishAt < 0 || step <= finishAt; step++ {
		buf[0] = 0
		if _, err := os.Stat(os.Getenv(outageFlag)); err == nil {
			buf[0] = 1
		}
		if err := s.AllReduceFloat64(ctx, buf, trainer.Sum); err != nil {
			return err
		}
		if buf[0] > 0 && finishAt < 0 {
			finishAt = step + 20
		}
		if err := s.Report(ctx, trainer.Metrics{"step": step}, nil); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// outageGang runs n worker processes of run on the fake agent, as the
// driver runs them on Nomad (a consul:// rendezvous with the job's prefix),
// with the outage grace given.
type outageGang struct {
	t       *testing.T
	fake    *fakeconsul.Server
	dir     string
	storage string
	cmds    []*exec.Cmd
	outs    []*bytes.Buffer
}

func startOutageGang(t *testing.T, fake *fakeconsul.Server, run string, n int, grace time.Duration) *outageGang {
	t.Helper()
	g := &outageGang{t: t, fake: fake, dir: t.TempDir(), storage: t.TempDir()}
	secret := filepath.Join(g.dir, "secret")
	must.NoError(t, os.WriteFile(secret, []byte("outage-test-secret"), 0o600))
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			"GORACE=atexit_sleep_ms=0",
			workerenv.Worker+"=1",
			workerenv.RunName+"="+run,
			workerenv.WorldSize+"="+strconv.Itoa(n),
			workerenv.RankHint+"="+strconv.Itoa(i),
			workerenv.MemberID+"="+fmt.Sprintf("alloc-%d", i),
			workerenv.Addr+"=127.0.0.1:0",
			workerenv.Rendezvous+"=consul://"+fake.Addr()+"/nomad-train/default/"+run+"/",
			workerenv.RendezvousTimeout+"=30s",
			workerenv.ConsulOutageGrace+"="+grace.String(),
			workerenv.StoragePath+"="+g.storage,
			workerenv.SecretFile+"="+secret,
			workerenv.Events+"="+g.events(i),
			outageFlag+"="+filepath.Join(g.dir, "flag"),
		)
		out := new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = out, out
		must.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		g.cmds, g.outs = append(g.cmds, cmd), append(g.outs, out)
	}
	return g
}

func (g *outageGang) events(i int) string {
	return filepath.Join(g.dir, fmt.Sprintf("events-%d.jsonl", i))
}

// records is how many reports rank 0 has committed.
func (g *outageGang) records(run string) int {
	return countRecords(filepath.Join(g.storage, run, storage.ProgressFile))
}

// waitExits waits for every worker and returns their exit codes and output.
func (g *outageGang) waitExits(ctx context.Context) ([]int, string) {
	codes := make([]int, len(g.cmds))
	for i, cmd := range g.cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				codes[i] = exit.ExitCode()
			} else if err != nil {
				codes[i] = -1
			}
		case <-ctx.Done():
			cmd.Process.Kill()
			codes[i] = -2
		}
	}
	var all bytes.Buffer
	for i, out := range g.outs {
		fmt.Fprintf(&all, "--- worker %d ---\n%s", i, out.String())
	}
	return codes, all.String()
}

// eventKinds counts the kinds of events worker i emitted.
func (g *outageGang) eventKinds(i int) map[string]int {
	f, err := os.Open(g.events(i))
	if err != nil {
		return nil
	}
	defer f.Close()
	kinds := make(map[string]int)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev workerenv.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			kinds[ev.Kind]++
		}
	}
	return kinds
}

// outageLength is how long TestConsulOutageRiddenOut keeps the agent down
// (CONSUL_OUTAGE_TEST_LENGTH overrides it, to measure longer outages).
func outageLength(t *testing.T) time.Duration {
	if v := os.Getenv("CONSUL_OUTAGE_TEST_LENGTH"); v != "" {
		d, err := time.ParseDuration(v)
		must.NoError(t, err)
		return d
	}
	return 5 * time.Second
}

// TestConsulOutageRiddenOut: a Consul agent restart (down for 5 s, back
// with nothing in it, as a dev agent) under a training gang of three
// worker processes loses no worker and spends no failure: no generation
// change, every worker exits 0, and the agent holds the run's keys and
// the workers' health services again.
func TestConsulOutageRiddenOut(t *testing.T) {
	if workerenv.IsWorker() {
		os.Exit(trainer.RunWorker(context.Background(), outageTrain))
	}
	const run, n = "outage", 3
	outage := outageLength(t)
	grace := max(2*time.Minute, outage+time.Minute)
	if v := os.Getenv("CONSUL_OUTAGE_TEST_GRACE"); v != "" {
		var err error
		grace, err = time.ParseDuration(v)
		must.NoError(t, err)
	}
	fake := fakeconsul.New(fakeconsul.Options{})
	defer fake.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+2*outage)
	defer cancel()
	g := startOutageGang(t, fake, run, n, grace)
	prefix := "nomad-train/default/" + run + "/" + run + "/"

	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return g.records(run) >= 5 }), must.Sprint("the run never trained"))
	fake.Stop()
	before := g.records(run)
	time.Sleep(outage)
	trained := g.records(run) - before
	must.NoError(t, fake.Start())
	restarted := time.Now()
	t.Logf("agent down %v (grace %v); %d steps trained meanwhile", outage, grace, trained)

	// The run goes on, and its keys and health services come back.
	back := func() bool {
		st, ok := fake.KV(prefix + "state")
		if !ok || !bytes.Contains(st, []byte(`"generation":1`)) {
			return false
		}
		if _, ok := fake.KV(prefix + "attempt"); !ok {
			return false
		}
		for i := range n {
			if _, ok := fake.KV(fmt.Sprintf("%sgen/1/alive/alloc-%d", prefix, i)); !ok {
				return false
			}
			if _, ok := fake.Service(fmt.Sprintf("%s-alloc-%d", run, i)); !ok {
				return false
			}
		}
		return g.records(run) > before+trained+5
	}
	must.True(t, fakeconsul.WaitFor(ctx, back), must.Sprint("the run's keys, services or progress did not come back"))
	t.Logf("the run's keys and services were back %v after the agent", time.Since(restarted).Round(time.Millisecond))
	for i := range n {
		c, ok := fake.CheckState(consulstore.CheckID(fmt.Sprintf("%s-alloc-%d", run, i)))
		must.True(t, ok)
		must.Eq(t, "passing", c.Status)
	}
	must.Positive(t, trained, must.Sprint("training waited for the agent"))

	must.NoError(t, os.WriteFile(filepath.Join(g.dir, "flag"), nil, 0o644))
	codes, out := g.waitExits(ctx)
	must.Eq(t, make([]int, n), codes, must.Sprint(out))
	for i := range n {
		kinds := g.eventKinds(i)
		must.Eq(t, 1, kinds["rendezvous_complete"], must.Sprintf("worker %d: %v\n%s", i, kinds, out))
		must.Eq(t, 0, kinds["generation_changed"], must.Sprintf("worker %d: %v\n%s", i, kinds, out))
		must.Eq(t, 0, kinds["failure_budget_used"], must.Sprintf("worker %d: %v\n%s", i, kinds, out))
	}
}

// TestConsulOutageLongerThanGrace: an agent down for longer than the
// outage grace ends the run as before the grace existed, with an error
// that names Consul, once the grace is over.
func TestConsulOutageLongerThanGrace(t *testing.T) {
	if workerenv.IsWorker() {
		os.Exit(trainer.RunWorker(context.Background(), outageTrain))
	}
	const run, n = "outage-long", 2
	const grace = 3 * time.Second
	fake := fakeconsul.New(fakeconsul.Options{})
	defer fake.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := startOutageGang(t, fake, run, n, grace)
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return g.records(run) >= 5 }), must.Sprint("the run never trained"))
	fake.Stop()
	stopped := time.Now()
	codes, out := g.waitExits(ctx)
	took := time.Since(stopped)
	t.Logf("workers exited %v after the agent stopped (grace %v)", took, grace)
	must.Eq(t, []int{trainer.ExitInfraError, trainer.ExitInfraError}, codes, must.Sprint(out))
	must.GreaterEq(t, grace, took, must.Sprint("a worker gave up before the grace was over"))
	must.StrContains(t, out, "longer than the outage grace (3s)")
	must.StrContains(t, out, "nomad-train worker: rendezvous: join rendezvous: consul create session")
}
