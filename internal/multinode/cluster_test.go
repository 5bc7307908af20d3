//go:build multinode

package multinode

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainspec"
	"github.com/shoenig/test/must"
)

// machineEnv marks every process of one simulated machine (Machine).
const machineEnv = "MULTINODE_PROOF_MACHINE"

// Node-down detection: a client's heartbeat TTL is min_heartbeat_ttl (at
// most twice that, staggered) and the server marks it down heartbeat_grace
// after a missed one, instead of Nomad's 10 s and 30 s defaults.
const (
	minHeartbeatTTL = "2s"
	heartbeatGrace  = "2s"
)

// agent is one Nomad agent process: the server or a client.
type agent struct {
	name   string
	dir    string // its own data directory (and config, log, plugins)
	http   string // host:port of its HTTP API
	marker string // machineEnv=name
	// private, when set, is a directory only this agent's processes see.
	private string
	// cgroup is the client's cgroup_parent, removed at the test's end.
	cgroup string
	cmd    *exec.Cmd
	exited chan struct{}
}

// cluster is one Nomad server and its clients on this machine.
type cluster struct {
	server  *agent
	clients []*agent
	api     *api.Client
}

// clientName names the i-th client (from 1), its Nomad agent and its
// Consul agent.
func clientName(i int) string { return fmt.Sprintf("client-%d", i) }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster starts a server and n clients; each client gets its own
// copy of the driver binary in its own plugin_dir, its own range of
// dynamic ports, and its own Consul agent, which it registers its
// allocations' services with and its workers rendezvous through.
// With rawExec the clients also run raw_exec tasks (the detached tuner's).
func startCluster(t *testing.T, nomadBin, driverBin, base string, consul consulAgents, n int, rawExec bool) *cluster {
	t.Helper()
	c := &cluster{}
	rpc := freePort(t)
	srv := &agent{name: "server", dir: filepath.Join(base, "server")}
	srv.http = "127.0.0.1:" + strconv.Itoa(freePort(t))
	_, httpPort, _ := net.SplitHostPort(srv.http)
	startAgent(t, nomadBin, srv, fmt.Sprintf(`
name         = "server"
data_dir     = %q
bind_addr    = "127.0.0.1"
log_level    = "DEBUG"
disable_update_check = true
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = %s
  rpc  = %d
  serf = %d
}
server {
  enabled           = true
  bootstrap_expect  = 1
  min_heartbeat_ttl = %q
  heartbeat_grace   = %q
}
client { enabled = false }
consul {
  address          = %q
  auto_advertise   = false
  server_auto_join = false
  client_auto_join = false
}
`, filepath.Join(srv.dir, "data"), httpPort, rpc, freePort(t), minHeartbeatTTL, heartbeatGrace, consul.server))
	c.server = srv
	var err error
	c.api, err = api.NewClient(&api.Config{Address: "http://" + srv.http})
	if err != nil {
		t.Fatalf("nomad api client: %v", err)
	}
	waitFor(t, time.Minute, "the server to elect itself leader", func() (bool, error) {
		leader, err := c.api.Status().Leader()
		return err == nil && leader != "", nil
	})
	for i := 1; i <= n; i++ {
		cl := &agent{name: clientName(i), dir: filepath.Join(base, clientName(i))}
		cl.private = filepath.Join(cl.dir, "data")
		cl.cgroup = fmt.Sprintf("nomad-train-multinode-%d-%d", os.Getpid(), i)
		cl.http = "127.0.0.1:" + strconv.Itoa(freePort(t))
		_, httpPort, _ := net.SplitHostPort(cl.http)
		plugins := filepath.Join(cl.dir, "plugins")
		if err := os.MkdirAll(plugins, 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, driverBin, filepath.Join(plugins, "train"))
		// Dynamic ports (the workers' collective and metrics ports) from a
		// range of its own: the clients share one network stack.
		lo := 21000 + 1000*i
		denied := "docker,exec,java,qemu,raw_exec,podman"
		if rawExec {
			denied = "docker,exec,java,qemu,podman"
		}
		startAgent(t, nomadBin, cl, fmt.Sprintf(`
name         = %q
data_dir     = %q
plugin_dir   = %q
bind_addr    = "127.0.0.1"
log_level    = "DEBUG"
disable_update_check = true
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = %s
  rpc  = %d
  serf = %d
}
client {
  enabled           = true
  servers           = ["127.0.0.1:%d"]
  network_interface = "lo"
  min_dynamic_port  = %d
  max_dynamic_port  = %d
  cgroup_parent     = %q
  # Keep finished allocations' directories: the proof reads the workers'
  # events files after the run.
  gc_disk_usage_threshold  = 99
  gc_inode_usage_threshold = 99
  options = {
    "driver.denylist"      = %q
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "raw_exec" {
  config { enabled = %t }
}
consul {
  address          = %q
  auto_advertise   = false
  server_auto_join = false
  client_auto_join = false
}
plugin "train" {
  config {
    consul_address = %q
    gpu_stats      = false
  }
}
`, cl.name, filepath.Join(cl.dir, "data"), plugins, httpPort, freePort(t), freePort(t), rpc, lo, lo+999, cl.cgroup, denied, rawExec, consul.clients[cl.name], consul.clients[cl.name]))
		c.clients = append(c.clients, cl)
	}
	waitFor(t, 2*time.Minute, fmt.Sprintf("%d ready clients with a healthy train driver", n), func() (bool, error) {
		nodes, _, err := c.api.Nodes().List(nil)
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, stub := range nodes {
			if stub.Status != api.NodeStatusReady {
				continue
			}
			if d := stub.Drivers["train"]; d != nil && d.Healthy {
				ready++
			}
		}
		return ready == n, nil
	})
	for _, cl := range c.clients {
		ents, err := os.ReadDir(cl.private)
		if err != nil || len(ents) > 0 {
			t.Fatalf("%s's data directory is not its own: this test sees %d entries in it (%v)", cl.name, len(ents), err)
		}
	}
	return c
}

// startAgent writes the agent's config and starts it with its machine
// marker in its environment; the test's end stops it and every process
// of its machine, by pid.
func startAgent(t *testing.T, bin string, a *agent, config string) {
	t.Helper()
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(a.dir, "agent.hcl")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(a.dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	a.marker = machineEnv + "=" + a.name
	a.cmd = exec.Command(bin, "agent", "-config", path)
	if a.private != "" {
		// A machine of its own: the agent and everything it starts see
		// the data directory on a tmpfs in their own mount namespace,
		// and no other client sees into it.
		if err := os.MkdirAll(a.private, 0o755); err != nil {
			t.Fatal(err)
		}
		a.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "--",
			"/bin/sh", "-c", `mount -t tmpfs -o size=1g,mode=0755 tmpfs "$1" && mkdir "$1/tmp" && TMPDIR="$1/tmp" exec "$2" agent -config "$3"`,
			"sh", a.private, bin, path)
	}
	a.cmd.Env = append(agentEnv(), a.marker)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("start nomad agent %s: %v", a.name, err)
	}
	a.exited = make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		a.stop(t)
		if t.Failed() {
			t.Logf("--- the end of %s's log:\n%s", a.name, a.logTail(30))
		}
	})
}

// agentEnv is this process's environment without Nomad's and ours: a
// client hands its environment to tasks of a driver without filesystem
// isolation, and the train driver refuses a task that sets NOMAD_TRAIN_*.
func agentEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOMAD_") {
			env = append(env, kv)
		}
	}
	return env
}

// stop ends the agent (SIGINT, then SIGKILL), then kills what is left of
// its machine: tasks run under shims in sessions of their own, which an
// agent's exit leaves running.
func (a *agent) stop(t *testing.T) {
	select {
	case <-a.exited:
	default:
		_ = a.cmd.Process.Signal(os.Interrupt)
		select {
		case <-a.exited:
		case <-time.After(15 * time.Second):
			t.Logf("agent %s (pid %d) ignored SIGINT; killing it", a.name, a.cmd.Process.Pid)
			_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
			<-a.exited
		}
	}
	if pids := killMachine(a.marker); len(pids) > 0 {
		t.Logf("stopped what was left of %s: pids %v", a.name, pids)
	}
	if a.cgroup != "" {
		removeCgroups(t, a.cgroup)
	}
}

// removeCgroups removes the (empty, once its processes are gone) cgroup
// directories a client made under parent, in every hierarchy.
func removeCgroups(t *testing.T, parent string) {
	roots, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
	roots = append(roots, filepath.Join("/sys/fs/cgroup", parent))
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // deepest first
			var err error
			for range 50 { // a killed process leaves its cgroup a moment later
				if err = os.Remove(dirs[i]); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil && !os.IsNotExist(err) {
				t.Logf("cgroup %s left behind: %v", dirs[i], err)
			}
		}
	}
}

// killMachine freezes every process of the machine marker names, then
// kills them all, as the machine's loss would: none of them sees the
// others go, or gets to start another. It returns their pids.
func killMachine(marker string) []int {
	stopped := map[int]bool{}
	for { // until a scan finds no process that was not frozen already
		procs, err := ReadProcs("/proc")
		if err != nil {
			break
		}
		fresh := 0
		for _, pid := range Machine(procs, marker) {
			if pid == os.Getpid() || stopped[pid] {
				continue
			}
			_ = syscall.Kill(pid, syscall.SIGSTOP)
			stopped[pid] = true
			fresh++
		}
		if fresh == 0 {
			break
		}
	}
	pids := make([]int, 0, len(stopped))
	for pid := range stopped {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		pids = append(pids, pid)
	}
	return pids
}

func (c *cluster) client(name string) *agent {
	for _, cl := range c.clients {
		if cl.name == name {
			return cl
		}
	}
	return nil
}

// logTail is the end of an agent's log, for a failure message.
func (a *agent) logTail(n int) string {
	f, err := os.Open(filepath.Join(a.dir, "agent.log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// needNomad returns the nomad binary on PATH, or skips t.
func needNomad(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad on PATH: build one from Nomad's public source (README.md, \"Multi-node proof\")")
	}
	return bin
}

// testBed is a cluster for a test of the command line: an S3 server, the
// binaries built, Consul, and clients whose agents and tasks see no S3
// keys: the workers read them from their job's Variable.
type testBed struct {
	s3     *s3test.Server
	base   string
	bins   binaries
	consul consulAgents
	c      *cluster
}

// newTestBed starts a test bed of n clients (raw_exec enabled with
// rawExec).
func newTestBed(t *testing.T, n int, rawExec bool) *testBed {
	t.Helper()
	nomadBin := needNomad(t)
	b := &testBed{s3: s3test.Start(t)}
	// A short base: a task API socket is under a client's data
	// directory, and a unix socket's path is at most 107 bytes.
	var err error
	b.base, err = os.MkdirTemp("", "nt")
	must.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(b.base) })
	b.bins = buildBinaries(t, b.base)
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(b.base, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(b.base, "none"))
	b.consul = startConsul(t, b.base, n)
	b.c = startCluster(t, nomadBin, b.bins.driver, b.base, b.consul, n, rawExec)
	return b
}

// putKeys writes the S3 keys into the Variable the job named job reads.
func (b *testBed) putKeys(t *testing.T, job string) {
	t.Helper()
	_, _, err := b.c.api.Variables().Create(&api.Variable{Path: trainspec.S3CredentialsVariablePath(job),
		Items: api.VariableItems{trainspec.S3AccessKeyItem: b.s3.AccessKey, trainspec.S3SecretKeyItem: b.s3.SecretKey}}, nil)
	must.NoError(t, err)
}

// storageBlock is a spec's run storage on the bed's S3 server at url.
func (b *testBed) storageBlock(url string) string {
	return fmt.Sprintf("    storage {\n      path       = %q\n      endpoint   = %q\n      region     = %q\n      path_style = true\n    }\n",
		url, b.s3.Endpoint, b.s3.Region)
}

// cli runs nomad-train in the bed's directory with env added (the keys
// to S3 for a command that reads the storage).
func (b *testBed) cli(env []string, args ...string) (string, error) {
	cmd := exec.Command(b.bins.cli, args...)
	cmd.Dir = b.base
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
