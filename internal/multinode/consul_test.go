//go:build multinode

package multinode

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
	"github.com/shoenig/test/must"
)

// fakeConsulEnv makes the test binary serve the fake Consul instead of
// running tests (the helper-process idiom): the dev agent and as many
// client agents as the variable says, one per Nomad client, over one KV.
// It prints their addresses, the dev agent's first, one a line, and
// serves until SIGTERM or SIGINT.
const fakeConsulEnv = "NOMAD_TRAIN_MULTINODE_FAKE_CONSUL"

func TestMain(m *testing.M) {
	if v := os.Getenv(fakeConsulEnv); v != "" {
		os.Exit(serveFakeConsul(v))
	}
	os.Exit(m.Run())
}

func serveFakeConsul(clients string) int {
	n, err := strconv.Atoi(clients)
	if err != nil || n < 0 {
		fmt.Fprintf(os.Stderr, "%s=%q: want a number of client agents\n", fakeConsulEnv, clients)
		return 2
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	srv := fakeconsul.New(fakeconsul.Options{})
	defer srv.Close()
	fmt.Println(srv.Addr())
	for i := 1; i <= n; i++ {
		a, err := srv.AddAgent(clientName(i))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(a.Addr())
	}
	<-sigs
	return 0
}

// consulAgents are the Consul agents of the test bed: the server's, and
// the one of each Nomad client by its name, which the client registers
// its allocations' services with and its workers rendezvous through.
type consulAgents struct {
	server  string
	clients map[string]string
	real    bool
}

// startConsul starts a real Consul dev agent when `consul` is on PATH
// (every client then shares it), and the fake as a process of its own
// otherwise, with an agent for each of n clients; the test's end stops it
// by pid.
func startConsul(t *testing.T, dir string, n int) consulAgents {
	t.Helper()
	if bin, err := exec.LookPath("consul"); err == nil {
		addr := startRealConsul(t, bin, dir)
		agents := consulAgents{server: addr, clients: map[string]string{}, real: true}
		for i := 1; i <= n; i++ {
			agents.clients[clientName(i)] = addr
		}
		return agents
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fakeConsulEnv+"="+strconv.Itoa(n))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the fake Consul agent: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	lines := bufio.NewReader(out)
	read := func() string {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("the fake Consul said no address: %v", err)
		}
		return strings.TrimSpace(line)
	}
	agents := consulAgents{server: read(), clients: map[string]string{}}
	for i := 1; i <= n; i++ {
		agents.clients[clientName(i)] = read()
	}
	t.Logf("consul: no `consul` on PATH: the fake (pid %d), its dev agent at %s and client agents %v",
		cmd.Process.Pid, agents.server, agents.clients)
	return agents
}

func startRealConsul(t *testing.T, bin, dir string) string {
	t.Helper()
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logf, err := os.Create(filepath.Join(dir, "consul.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-http-port", strconv.Itoa(port), "-dns-port", "-1", "-grpc-port", "-1",
		"-serf-lan-port", strconv.Itoa(freePort(t)), "-serf-wan-port", strconv.Itoa(freePort(t)),
		"-server-port", strconv.Itoa(freePort(t)))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start consul: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGINT); _ = cmd.Wait() })
	waitFor(t, time.Minute, "consul to elect a leader", func() (bool, error) {
		resp, err := http.Get("http://" + addr + "/v1/status/leader")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		var b [64]byte
		n, _ := resp.Body.Read(b[:])
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b[:n]), ":"), nil
	})
	t.Logf("consul: a real dev agent (pid %d) at %s", cmd.Process.Pid, addr)
	return addr
}

// sighting is what the test saw of one service Nomad registered for an
// allocation in a node's Consul agent.
type sighting struct {
	node, name string
	checks     int
	registered time.Time
	passing    time.Time // when every check of it first passed, or zero
}

// serviceWatch follows, ten times a second, the services Nomad registers in
// the clients' agents for allocations ("_nomad-task-<alloc ID>-...").
type serviceWatch struct {
	mu   sync.Mutex
	seen map[string]*sighting // by service ID
	stop func()
}

func watchServices(t *testing.T, agents consulAgents) *serviceWatch {
	t.Helper()
	w := &serviceWatch{seen: map[string]*sighting{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for node, addr := range agents.clients {
		client, err := capi.NewClient(&capi.Config{Address: addr})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				w.look(node, client.Agent())
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	w.stop = func() { cancel(); wg.Wait() }
	t.Cleanup(w.stop)
	return w
}

func (w *serviceWatch) look(node string, agent *capi.Agent) {
	services, err := agent.Services()
	if err != nil {
		return // a lost node's agent, or one restarting
	}
	checks, err := agent.Checks()
	if err != nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, svc := range services {
		if !strings.HasPrefix(id, "_nomad-task-") {
			continue
		}
		s, ok := w.seen[id]
		if !ok {
			s = &sighting{node: node, name: svc.Service, registered: now}
			w.seen[id] = s
		}
		n, passing := 0, 0
		for _, c := range checks {
			if c.ServiceID == id {
				n++
				if c.Status == capi.HealthPassing {
					passing++
				}
			}
		}
		s.checks = max(s.checks, n)
		if n > 0 && passing == n && s.passing.IsZero() {
			s.passing = now
		}
	}
}

// of returns the sightings of the services of allocation alloc.
func (w *serviceWatch) of(alloc string) []sighting {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []sighting
	for id, s := range w.seen {
		if strings.HasPrefix(id, "_nomad-task-"+alloc+"-") {
			out = append(out, *s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// registeredIn lists the allocation services agent addr holds now.
func registeredIn(t *testing.T, addr string) []string {
	t.Helper()
	client, err := capi.NewClient(&capi.Config{Address: addr})
	must.NoError(t, err)
	services, err := client.Agent().Services()
	must.NoError(t, err)
	var out []string
	for id := range services {
		if strings.HasPrefix(id, "_nomad-task-") {
			out = append(out, id)
		}
	}
	return out
}
