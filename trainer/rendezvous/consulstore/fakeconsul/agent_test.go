package fakeconsul_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
)

// The agent API as a Nomad client uses it (fingerprint, service sync) and
// as a worker's Health does, run on the fake and, when CONSUL_HTTP_ADDR
// names one, on a real agent: what the fake answers is what Consul
// answers.

func TestFakeAgentAPI(t *testing.T) {
	fake := fakeconsul.New(fakeconsul.Options{})
	t.Cleanup(fake.Close)
	runAgentAPI(t, client(t, fake.Addr()))
}

func TestRealAgentAPI(t *testing.T) {
	addr := os.Getenv("CONSUL_HTTP_ADDR")
	if addr == "" {
		t.Skip("CONSUL_HTTP_ADDR is not set: no Consul agent to test against")
	}
	runAgentAPI(t, client(t, addr))
}

func client(t *testing.T, addr string) *capi.Client {
	t.Helper()
	c, err := capi.NewClient(&capi.Config{Address: addr})
	must.NoError(t, err)
	return c
}

// runAgentAPI registers services and checks the way Nomad does (the
// service first, its checks on their own) and follows them.
func runAgentAPI(t *testing.T, c *capi.Client) {
	agent := c.Agent()
	prefix := fmt.Sprintf("_nomad-task-test%d", time.Now().UnixNano())

	t.Run("self has what Nomad fingerprints", func(t *testing.T) {
		self, err := agent.Self()
		must.NoError(t, err)
		for _, field := range []string{"Version", "Revision", "Datacenter", "NodeName"} {
			_, ok := self["Config"][field].(string)
			must.True(t, ok, must.Sprintf("Config.%s is a string: %v", field, self["Config"][field]))
		}
		_, ok := self["Config"]["Server"].(bool)
		must.True(t, ok, must.Sprint("Config.Server"))
		for _, field := range []string{"GRPCPort", "GRPCTLSPort", "DNSPort"} {
			_, ok := self["DebugConfig"][field].(float64)
			must.True(t, ok, must.Sprintf("DebugConfig.%s is a number", field))
		}
		_, ok = self["DebugConfig"]["DNSAddrs"].([]any)
		must.True(t, ok, must.Sprint("DebugConfig.DNSAddrs is a list"))
		_, ok = self["DebugConfig"]["ConnectEnabled"].(bool)
		must.True(t, ok, must.Sprint("DebugConfig.ConnectEnabled"))
		tags, ok := self["Member"]["Tags"].(map[string]any)
		must.True(t, ok, must.Sprint("Member.Tags"))
		_, ok = tags["segment"].(string)
		must.True(t, ok, must.Sprint("Member.Tags.segment"))
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	closed := closedPort(t)
	codes := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		w.WriteHeader(code)
		fmt.Fprintf(w, "answered %d to %s", code, r.Header.Get("User-Agent"))
	}))
	t.Cleanup(codes.Close)

	svcID := prefix + "-group-workers-train-port"
	reg := &capi.AgentServiceRegistration{ID: svcID, Name: "fake-test-worker", Address: "127.0.0.1", Port: port,
		Tags: []string{"nomad-train", "run=x"}, Meta: map[string]string{"external-source": "nomad"}}
	must.NoError(t, agent.ServiceRegisterOpts(reg, capi.ServiceRegisterOpts{}))
	t.Cleanup(func() { _ = agent.ServiceDeregister(svcID) })

	services, err := agent.Services()
	must.NoError(t, err)
	svc, ok := services[svcID]
	must.True(t, ok, must.Sprintf("service %s listed in %v", svcID, services))
	must.Eq(t, "fake-test-worker", svc.Service)
	must.Eq(t, []string{"nomad-train", "run=x"}, svc.Tags)
	must.Eq(t, map[string]string{"external-source": "nomad"}, svc.Meta)
	must.Eq(t, capi.AgentWeights{Passing: 1, Warning: 1}, svc.Weights, must.Sprint("Consul's default weights: Nomad compares them"))
	must.Eq(t, port, svc.Port)
	must.Eq(t, "127.0.0.1", svc.TaggedAddresses["lan_ipv4"].Address)

	checks := map[string]*capi.AgentCheckRegistration{
		"tcp-open":   tcpCheck(prefix+"-tcp-open", svcID, fmt.Sprintf("127.0.0.1:%d", port)),
		"tcp-closed": tcpCheck(prefix+"-tcp-closed", svcID, fmt.Sprintf("127.0.0.1:%d", closed)),
		"http-200":   httpCheck(prefix+"-http-200", svcID, codes.URL+"/?code=200"),
		"http-429":   httpCheck(prefix+"-http-429", svcID, codes.URL+"/?code=429"),
		"http-500":   httpCheck(prefix+"-http-500", svcID, codes.URL+"/?code=500"),
	}
	for _, reg := range checks {
		must.NoError(t, agent.CheckRegister(reg))
	}
	want := map[string]string{"tcp-open": "passing", "tcp-closed": "critical", "http-200": "passing",
		"http-429": "warning", "http-500": "critical"}
	var got map[string]*capi.AgentCheck
	waitUntil(t, 10*time.Second, "every check to run", func() bool {
		got, err = agent.Checks()
		must.NoError(t, err)
		for _, reg := range checks {
			if c, ok := got[reg.ID]; !ok || c.Output == "" {
				return false
			}
		}
		return true
	})
	for name, reg := range checks {
		c := got[reg.ID]
		must.Eq(t, want[name], c.Status, must.Sprintf("%s: output %q", name, c.Output))
		must.Eq(t, svcID, c.ServiceID)
		must.Eq(t, "fake-test-worker", c.ServiceName)
	}
	must.Eq(t, "tcp", got[checks["tcp-open"].ID].Type)
	must.Eq(t, "http", got[checks["http-200"].ID].Type)
	must.StrContains(t, got[checks["http-200"].ID].Output, "200 OK")
	must.StrContains(t, got[checks["http-200"].ID].Output, "Consul Health Check")

	t.Run("a check of no service", func(t *testing.T) {
		err := agent.CheckRegister(tcpCheck(prefix+"-orphan", prefix+"-no-such-service", "127.0.0.1:1"))
		must.ErrorContains(t, err, "does not exist")
	})
	t.Run("TTL and interval both", func(t *testing.T) {
		reg := tcpCheck(prefix+"-both", svcID, "")
		reg.TCP, reg.TTL = "", "10s"
		must.Error(t, agent.CheckRegister(reg))
	})
	t.Run("registering again keeps checks unless told to replace them", func(t *testing.T) {
		must.NoError(t, agent.ServiceRegisterOpts(reg, capi.ServiceRegisterOpts{}))
		got, err := agent.Checks()
		must.NoError(t, err)
		must.MapContainsKey(t, got, checks["tcp-open"].ID)
		must.NoError(t, agent.ServiceRegisterOpts(reg, capi.ServiceRegisterOpts{ReplaceExistingChecks: true}))
		got, err = agent.Checks()
		must.NoError(t, err)
		for _, c := range checks {
			must.MapNotContainsKey(t, got, c.ID)
		}
	})
	t.Run("deregistering", func(t *testing.T) {
		c := tcpCheck(prefix+"-gone", svcID, fmt.Sprintf("127.0.0.1:%d", port))
		must.NoError(t, agent.CheckRegister(c))
		must.NoError(t, agent.CheckDeregister(c.ID))
		must.Error(t, agent.CheckDeregister(c.ID), must.Sprint("an unknown check"))
		must.NoError(t, agent.CheckRegister(c))
		must.NoError(t, agent.ServiceDeregister(svcID))
		got, err := agent.Checks()
		must.NoError(t, err)
		must.MapNotContainsKey(t, got, c.ID, must.Sprint("a service's checks go with it"))
		must.Error(t, agent.ServiceDeregister(svcID), must.Sprint("an unknown service"))
	})
}

func tcpCheck(id, service, addr string) *capi.AgentCheckRegistration {
	return &capi.AgentCheckRegistration{ID: id, Name: "collective port", ServiceID: service,
		AgentServiceCheck: capi.AgentServiceCheck{TCP: addr, Interval: "1s", Timeout: "1s"}}
}

func httpCheck(id, service, url string) *capi.AgentCheckRegistration {
	return &capi.AgentCheckRegistration{ID: id, Name: "metrics", ServiceID: service,
		AgentServiceCheck: capi.AgentServiceCheck{HTTP: url, Interval: "1s", Timeout: "1s"}}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if !fakeconsul.WaitFor(ctx, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Agents made by AddAgent are other nodes' agents: each has its own
// services, and all see one KV, which a client agent cannot reach while
// the server is down.
func TestAgentsShareTheKVNotTheirServices(t *testing.T) {
	fake := fakeconsul.New(fakeconsul.Options{})
	t.Cleanup(fake.Close)
	other, err := fake.AddAgent("client-1")
	must.NoError(t, err)
	dev, cl := client(t, fake.Addr()), client(t, other.Addr())

	self, err := cl.Agent().Self()
	must.NoError(t, err)
	must.Eq(t, "client-1", self["Config"]["NodeName"].(string))
	must.False(t, self["Config"]["Server"].(bool))

	must.NoError(t, cl.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: "w0", Name: "worker",
		Check: &capi.AgentServiceCheck{TTL: "10s", Status: "passing"}}))
	_, ok := other.Service("w0")
	must.True(t, ok)
	_, ok = fake.Service("w0")
	must.False(t, ok, must.Sprint("registered with the client agent only"))
	devServices, err := dev.Agent().Services()
	must.NoError(t, err)
	must.MapEmpty(t, devServices)

	_, err = cl.KV().Put(&capi.KVPair{Key: "k", Value: []byte("v")}, nil)
	must.NoError(t, err)
	kv, _, err := dev.KV().Get("k", nil)
	must.NoError(t, err)
	must.Eq(t, "v", string(kv.Value))

	fake.Stop()
	_, _, err = cl.KV().Get("k", nil)
	must.ErrorContains(t, err, "No known Consul servers")
	services, err := cl.Agent().Services()
	must.NoError(t, err, must.Sprint("a client agent serves its own endpoints without its server"))
	must.MapContainsKey(t, services, "w0")
}
