//go:build multinode

package multinode

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
)

// fakeConsulEnv makes the test binary serve the fake Consul agent instead
// of running tests (the helper-process idiom): it prints its address and
// serves until SIGTERM or SIGINT.
const fakeConsulEnv = "NOMAD_TRAIN_MULTINODE_FAKE_CONSUL"

func TestMain(m *testing.M) {
	if os.Getenv(fakeConsulEnv) == "1" {
		os.Exit(serveFakeConsul())
	}
	os.Exit(m.Run())
}

func serveFakeConsul() int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	srv := fakeconsul.New(fakeconsul.Options{})
	defer srv.Close()
	fmt.Println(srv.Addr())
	<-sigs
	return 0
}

// consulAgent is the Consul the workers rendezvous through: its address,
// and whether it is a real agent (Nomad can register services in it).
type consulAgent struct {
	addr string
	real bool
}

// startConsul starts a real Consul dev agent when `consul` is on PATH,
// and the fake agent as a process of its own otherwise; the test's end
// stops it by pid.
func startConsul(t *testing.T, dir string) consulAgent {
	t.Helper()
	if bin, err := exec.LookPath("consul"); err == nil {
		return startRealConsul(t, bin, dir)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fakeConsulEnv+"=1")
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
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the fake Consul agent said no address: %v", err)
	}
	addr := strings.TrimSpace(line)
	t.Logf("consul: no `consul` on PATH: the fake agent (pid %d) at %s", cmd.Process.Pid, addr)
	return consulAgent{addr: addr}
}

func startRealConsul(t *testing.T, bin, dir string) consulAgent {
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
	return consulAgent{addr: addr, real: true}
}
