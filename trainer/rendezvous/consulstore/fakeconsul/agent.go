package fakeconsul

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
)

// /v1/agent: an agent's own services and checks, as a worker's Health and
// a Nomad client's service sync use them. In Consul they are local to the
// agent they were registered with, while the KV and sessions are the
// cluster's: AddAgent serves another agent (another node) over the same
// KV. The agent runs HTTP and TCP checks itself; TTL checks are fed by
// their workload.

// What the fake answers as: the release its behaviour was checked
// against, and Consul's default datacenter.
const (
	consulVersion = "1.22.7"
	datacenter    = "dc1"
)

// Agent is one Consul agent: its node name, its address and what was
// registered with it. The Server is an agent itself (the dev agent, a
// server); AddAgent makes client agents.
type Agent struct {
	s      *Server
	node   string
	id     string
	server bool
	addr   string
	http   *http.Server // guarded by s.lifeMu

	// guarded by s.mu:
	services map[string]*Service
	checks   map[string]*Check
}

// Service is a registered agent service.
type Service struct {
	ID, Name, Address string
	Port              int
	Tags              []string
	Meta              map[string]string
	EnableTagOverride bool
	Weights           Weights
	// CheckIDs are its checks' IDs, sorted.
	CheckIDs []string
}

// Weights are a service's DNS weights (Consul's default is 1 and 1).
type Weights struct{ Passing, Warning int }

func newAgent(s *Server, node string, server bool) *Agent {
	a := &Agent{s: s, node: node, id: newUUID(), server: server}
	a.reset()
	return a
}

// reset forgets what was registered, as a restarted dev agent. mu is held
// (or a is not yet shared).
func (a *Agent) reset() {
	for _, c := range a.checks {
		c.stop()
	}
	a.services = make(map[string]*Service)
	a.checks = make(map[string]*Check)
}

// Addr is the agent's "host:port".
func (a *Agent) Addr() string { return a.addr }

// Node is the agent's node name.
func (a *Agent) Node() string { return a.node }

// Service returns the service id registered with this agent, if any.
func (a *Agent) Service(id string) (Service, bool) {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	svc, ok := a.services[id]
	if !ok {
		return Service{}, false
	}
	return a.serviceCopy(svc), true
}

// CheckState returns the check id as the agent sees it now (a TTL check
// not updated within its TTL is critical).
func (a *Agent) CheckState(id string) (Check, bool) {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	c, ok := a.checks[id]
	if !ok {
		return Check{}, false
	}
	a.s.expireCheckLocked(c)
	out := *c
	out.timer = nil
	return out, true
}

// serviceCopy returns svc with its check IDs. mu is held.
func (a *Agent) serviceCopy(svc *Service) Service {
	out := *svc
	out.Tags = slices.Clone(svc.Tags)
	out.Meta = maps.Clone(svc.Meta)
	out.CheckIDs = nil
	for id, c := range a.checks {
		if c.ServiceID == svc.ID {
			out.CheckIDs = append(out.CheckIDs, id)
		}
	}
	slices.Sort(out.CheckIDs)
	return out
}

// removeService forgets service id and its checks; it reports whether
// there was one. mu is held.
func (a *Agent) removeService(id string) bool {
	if _, ok := a.services[id]; !ok {
		return false
	}
	a.removeChecksOf(id)
	delete(a.services, id)
	return true
}

// removeChecksOf stops and forgets the checks of service id. mu is held.
func (a *Agent) removeChecksOf(id string) {
	for cid, c := range a.checks {
		if c.ServiceID == id {
			a.removeCheck(cid)
		}
	}
}

func (a *Agent) handleSelf(w http.ResponseWriter, _ *http.Request) {
	role := "node"
	if a.server {
		role = "consul"
	}
	writeJSON(w, http.StatusOK, 0, map[string]any{
		"Config": map[string]any{
			"Datacenter": datacenter, "PrimaryDatacenter": datacenter,
			"NodeName": a.node, "NodeID": a.id, "Server": a.server,
			"Revision": "fake", "Version": consulVersion, "BuildDate": "2026-01-01T00:00:00Z",
		},
		// The fake serves no DNS and no gRPC: ports -1, as an agent
		// started with -dns-port -1 -grpc-port -1.
		"DebugConfig": map[string]any{
			"ConnectEnabled": false, "DNSPort": -1, "DNSAddrs": []string{},
			"GRPCPort": -1, "GRPCTLSPort": -1,
		},
		"Member": map[string]any{
			"Name": a.node, "Addr": "127.0.0.1", "Port": 8301, "Status": 1,
			"Tags": map[string]string{"dc": datacenter, "role": role, "segment": "",
				"build": consulVersion + ":fake", "id": a.id, "vsn": "2"},
		},
		"Meta":  map[string]string{"consul-network-segment": "", "consul-version": consulVersion},
		"Stats": map[string]any{},
	})
}

// agentService is a service as GET /v1/agent/services answers it.
type agentService struct {
	ID, Service, Address, Datacenter string
	Kind                             string
	Port                             int
	Tags                             []string
	Meta                             map[string]string
	TaggedAddresses                  map[string]any `json:",omitempty"`
	Weights                          Weights
	EnableTagOverride                bool
}

func (a *Agent) listed(svc *Service) agentService {
	out := agentService{ID: svc.ID, Service: svc.Name, Address: svc.Address, Datacenter: datacenter,
		Port: svc.Port, Tags: slices.Clone(svc.Tags), Meta: maps.Clone(svc.Meta),
		Weights: svc.Weights, EnableTagOverride: svc.EnableTagOverride}
	if out.Tags == nil {
		out.Tags = []string{}
	}
	if out.Meta == nil {
		out.Meta = map[string]string{}
	}
	// Consul adds the service's own address under these tags when it is
	// an IP address.
	if ip := net.ParseIP(svc.Address); ip != nil {
		tagged := map[string]any{"Address": svc.Address, "Port": svc.Port}
		if ip.To4() != nil {
			out.TaggedAddresses = map[string]any{"lan_ipv4": tagged, "wan_ipv4": tagged}
		} else {
			out.TaggedAddresses = map[string]any{"lan_ipv6": tagged, "wan_ipv6": tagged}
		}
	}
	return out
}

func (a *Agent) handleServices(w http.ResponseWriter, _ *http.Request) {
	a.s.mu.Lock()
	out := make(map[string]agentService, len(a.services))
	for id, svc := range a.services {
		out[id] = a.listed(svc)
	}
	a.s.mu.Unlock()
	writeJSON(w, http.StatusOK, 0, out)
}

func (a *Agent) handleService(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	a.s.mu.Lock()
	svc, ok := a.services[id]
	var out agentService
	if ok {
		out = a.listed(svc)
	}
	a.s.mu.Unlock()
	if !ok {
		writeText(w, http.StatusNotFound, fmt.Sprintf("unknown service ID: %s", id))
		return
	}
	writeJSON(w, http.StatusOK, 0, out)
}

func (a *Agent) handleChecks(w http.ResponseWriter, _ *http.Request) {
	a.s.mu.Lock()
	out := make(map[string]any, len(a.checks))
	for id, c := range a.checks {
		a.s.expireCheckLocked(c)
		var name string
		var tags []string
		if svc, ok := a.services[c.ServiceID]; ok {
			name, tags = svc.Name, slices.Clone(svc.Tags)
		}
		if tags == nil {
			tags = []string{}
		}
		interval, timeout := "", ""
		if c.Type != "ttl" {
			interval, timeout = c.Interval.String(), c.Timeout.String()
		}
		out[id] = map[string]any{
			"Node": a.node, "CheckID": id, "Name": c.Name, "Status": c.Status, "Notes": "",
			"Output": c.Output, "ServiceID": c.ServiceID, "ServiceName": name, "ServiceTags": tags,
			"Type": c.Type, "Interval": interval, "Timeout": timeout, "ExposedPort": 0,
			"Definition": map[string]any{}, "CreateIndex": 0, "ModifyIndex": 0,
		}
	}
	a.s.mu.Unlock()
	writeJSON(w, http.StatusOK, 0, out)
}

func (a *Agent) handleServiceRegister(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ID, Name, Address, Kind string
		Port                    int
		Tags                    []string
		Meta                    map[string]string
		EnableTagOverride       bool
		Weights                 *Weights
		Check                   *checkDef
		Checks                  []*checkDef
		Connect                 json.RawMessage
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeText(w, http.StatusBadRequest, "Request decode failed: "+err.Error())
		return
	}
	switch {
	case body.Name == "":
		writeText(w, http.StatusBadRequest, "Missing service name")
		return
	case body.Kind != "" || (len(body.Connect) > 0 && string(body.Connect) != "null"):
		writeText(w, http.StatusBadRequest, "fake: only typical services are served (no Kind, no Connect)")
		return
	case body.Weights != nil && body.Weights.Passing < 1:
		writeText(w, http.StatusBadRequest, "Invalid Weights: Passing must be greater than 0")
		return
	}
	if body.ID == "" {
		body.ID = body.Name
	}
	svc := &Service{ID: body.ID, Name: body.Name, Address: body.Address, Port: body.Port,
		Tags: body.Tags, Meta: body.Meta, EnableTagOverride: body.EnableTagOverride,
		Weights: Weights{Passing: 1, Warning: 1}}
	if body.Weights != nil {
		svc.Weights = *body.Weights
	}
	defs := body.Checks
	if body.Check != nil {
		defs = append([]*checkDef{body.Check}, defs...)
	}
	var checks []*Check
	for i, d := range defs {
		id := d.CheckID
		if id == "" {
			id = "service:" + body.ID
			if len(defs) > 1 {
				id = fmt.Sprintf("service:%s:%d", body.ID, i+1)
			}
		}
		if d.Name == "" {
			d.Name = fmt.Sprintf("Service '%s' check", body.Name)
		}
		c, err := a.newCheck(d, id, body.ID)
		if err != nil {
			writeText(w, http.StatusBadRequest, err.Error())
			return
		}
		checks = append(checks, c)
	}
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := a.services[body.ID]; ok && r.URL.Query().Get("replace-existing-checks") == "true" {
		a.removeChecksOf(body.ID) // its checks are this registration's alone
	}
	a.services[body.ID] = svc
	for _, c := range checks {
		a.addCheck(c)
	}
	s.index++
	w.WriteHeader(http.StatusOK)
}

func (a *Agent) handleServiceDeregister(w http.ResponseWriter, r *http.Request) {
	a.deregister(w, r, "service", a.removeService)
}

// deregister answers the deregistration of the service or check the path
// names; remove forgets it and reports whether it was registered.
func (a *Agent) deregister(w http.ResponseWriter, r *http.Request, what string, remove func(id string) bool) {
	id := r.PathValue("id")
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	if !remove(id) {
		writeText(w, http.StatusNotFound, "Unknown "+what+" ID "+strconv.Quote(id))
		return
	}
	a.s.index++
	w.WriteHeader(http.StatusOK)
}

func (a *Agent) handleCheckRegister(w http.ResponseWriter, r *http.Request) {
	var d checkDef
	if err := json.NewDecoder(r.Body).Decode(&d); err != nil {
		writeText(w, http.StatusBadRequest, "Request decode failed: "+err.Error())
		return
	}
	if d.Name == "" {
		writeText(w, http.StatusBadRequest, "Missing check name")
		return
	}
	id := d.ID
	if id == "" {
		id = d.Name
	}
	c, err := a.newCheck(&d, id, d.ServiceID)
	if err != nil {
		writeText(w, http.StatusBadRequest, err.Error())
		return
	}
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.ServiceID != "" {
		if _, ok := a.services[d.ServiceID]; !ok {
			writeText(w, http.StatusBadRequest, fmt.Sprintf("ServiceID %q does not exist", d.ServiceID))
			return
		}
	}
	a.addCheck(c)
	s.index++
	w.WriteHeader(http.StatusOK)
}

func (a *Agent) handleCheckDeregister(w http.ResponseWriter, r *http.Request) {
	a.deregister(w, r, "check", a.removeCheck)
}

func (a *Agent) handleCheckUpdate(w http.ResponseWriter, r *http.Request) {
	var body struct{ Status, Output string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeText(w, http.StatusBadRequest, "Request decode failed: "+err.Error())
		return
	}
	if !validStatus(body.Status) {
		writeText(w, http.StatusBadRequest, "Invalid check status: "+strconv.Quote(body.Status))
		return
	}
	id := r.PathValue("id")
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	c, ok := a.checks[id]
	if !ok {
		writeText(w, http.StatusNotFound, "Unknown check ID "+strconv.Quote(id))
		return
	}
	if c.Type != "ttl" {
		writeText(w, http.StatusInternalServerError, fmt.Sprintf("CheckID %q does not have associated TTL", id))
		return
	}
	c.Status, c.Output, c.updated = body.Status, body.Output, a.s.clock.Now()
	c.Updates++
	w.WriteHeader(http.StatusOK)
}
