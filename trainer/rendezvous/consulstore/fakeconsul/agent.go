package fakeconsul

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// /v1/agent: an agent's own services and checks, as a worker's Health and
// a Nomad client's service sync use them. In Consul they are local to the
// agent they were registered with, while the KV and sessions are the
// cluster's: AddAgent serves another agent (another node) over the same
// KV. The agent runs HTTP and TCP checks itself; TTL checks are fed by
// their workload.

// How Consul's agent runs checks.
const (
	minCheckInterval    = time.Second      // a shorter interval is raised to it
	defaultCheckTimeout = 10 * time.Second // an HTTP or TCP probe's
	maxCheckOutput      = 4 << 10          // of an HTTP check's body
	// consulVersion is the release the fake answers as (the one its
	// behaviour was checked against).
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

// Check is an agent check: TTL (fed by the workload), HTTP or TCP (run
// by the agent every Interval).
type Check struct {
	ID, Name, ServiceID string
	Type                string // "ttl", "http" or "tcp"
	TTL                 time.Duration
	HTTP, Method, TCP   string
	Interval, Timeout   time.Duration
	Status              string
	Output              string
	// Updates counts TTL updates; Runs counts HTTP and TCP probes.
	Updates, Runs int

	header        http.Header
	body          string
	tlsSkipVerify bool
	updated       time.Time
	timer         rendezvous.Timer
}

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

// checkDef is a check as registered, alone (ID) or in a service (CheckID).
type checkDef struct {
	ID, CheckID, Name, Notes, ServiceID string
	TTL, Interval, Timeout              string
	HTTP, Method, Body, TCP             string
	Header                              map[string][]string
	TLSSkipVerify                       bool
	Status                              string
	// Kinds the fake does not run: registering one is refused.
	GRPC, H2PING, UDP, DockerContainerID, AliasService, AliasNode, OSService string
	Args                                                                     []string
}

// requestError is the text of a 400 answer, in Consul's words.
type requestError string

func (e requestError) Error() string { return string(e) }

func invalid(format string, args ...any) error { return requestError(fmt.Sprintf(format, args...)) }

// newCheck validates d and makes its check (not yet running).
func (a *Agent) newCheck(d *checkDef, id, serviceID string) (*Check, error) {
	if d.GRPC != "" || d.H2PING != "" || d.UDP != "" || d.DockerContainerID != "" ||
		d.AliasService != "" || d.AliasNode != "" || d.OSService != "" || len(d.Args) > 0 {
		return nil, invalid("fake: only TTL, HTTP and TCP checks are served (check %q)", id)
	}
	c := &Check{ID: id, Name: d.Name, ServiceID: serviceID, Status: d.Status, Output: "",
		HTTP: d.HTTP, TCP: d.TCP, Method: d.Method, header: d.Header, body: d.Body,
		tlsSkipVerify: d.TLSSkipVerify, updated: a.s.clock.Now()}
	switch c.Status {
	case "":
		c.Status = "critical"
	case "passing", "warning", "critical":
	default:
		return nil, invalid("Invalid check status: %q", c.Status)
	}
	duration := func(field, v string) (time.Duration, error) {
		if v == "" {
			return 0, nil
		}
		dur, err := time.ParseDuration(v)
		if err != nil {
			return 0, invalid("Request decode failed: %s: %v", field, err)
		}
		return dur, nil
	}
	var err error
	if c.TTL, err = duration("TTL", d.TTL); err != nil {
		return nil, err
	}
	if c.Interval, err = duration("Interval", d.Interval); err != nil {
		return nil, err
	}
	if c.Timeout, err = duration("Timeout", d.Timeout); err != nil {
		return nil, err
	}
	kinds := 0
	for _, set := range []bool{d.TTL != "", d.HTTP != "", d.TCP != ""} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds != 1:
		return nil, invalid("Invalid check: exactly one of TTL, HTTP and TCP is required (check %q)", id)
	case d.TTL != "":
		if c.TTL <= 0 {
			return nil, invalid("Invalid check: TTL must be > 0 for TTL checks (check %q)", id)
		}
		if d.Interval != "" {
			return nil, invalid("Invalid check: Interval cannot be set for TTL checks (check %q)", id)
		}
		c.Type = "ttl"
	default:
		if c.Interval <= 0 {
			return nil, invalid("Invalid check: Interval must be > 0 for HTTP and TCP checks (check %q)", id)
		}
		c.Interval = max(c.Interval, minCheckInterval)
		if c.Timeout <= 0 {
			c.Timeout = defaultCheckTimeout
		}
		c.Type = "tcp"
		if d.HTTP != "" {
			c.Type = "http"
			if c.Method == "" {
				c.Method = http.MethodGet
			}
		}
	}
	if c.Name == "" {
		c.Name = "Check " + id
	}
	return c, nil
}

// addCheck puts c in place of any check of its ID and starts running it.
// mu is held.
func (a *Agent) addCheck(c *Check) {
	if old, ok := a.checks[c.ID]; ok {
		old.stop()
	}
	a.checks[c.ID] = c
	if c.Type != "ttl" {
		// Consul staggers a check's first run over its interval.
		a.schedule(c, rand.N(c.Interval))
	}
}

// removeCheck stops and forgets check id; it reports whether there was
// one. mu is held.
func (a *Agent) removeCheck(id string) bool {
	c, ok := a.checks[id]
	if ok {
		c.stop()
		delete(a.checks, id)
	}
	return ok
}

// removeService forgets service id and its checks; it reports whether
// there was one. mu is held.
func (a *Agent) removeService(id string) bool {
	if _, ok := a.services[id]; !ok {
		return false
	}
	for cid, c := range a.checks {
		if c.ServiceID == id {
			a.removeCheck(cid)
		}
	}
	delete(a.services, id)
	return true
}

func (c *Check) stop() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

// schedule runs check c after d, then every Interval while it is
// registered. mu is held.
func (a *Agent) schedule(c *Check, d time.Duration) {
	c.timer = a.s.clock.AfterFunc(d, func() {
		status, output := c.probe()
		a.s.mu.Lock()
		defer a.s.mu.Unlock()
		if a.checks[c.ID] != c || (a == a.s.self && a.s.closed) {
			return // deregistered or replaced meanwhile, or the agent stopped
		}
		c.Status, c.Output, c.updated = status, output, a.s.clock.Now()
		c.Runs++
		a.schedule(c, c.Interval)
	})
}

// probe runs an HTTP or TCP check once, as Consul's agent does: a TCP
// connection that opens passes; an HTTP answer passes when 2xx, warns on
// 429 Too Many Requests, and is critical otherwise.
func (c *Check) probe() (status, output string) {
	if c.Type == "tcp" {
		conn, err := net.DialTimeout("tcp", c.TCP, c.Timeout)
		if err != nil {
			return "critical", err.Error()
		}
		conn.Close()
		return "passing", fmt.Sprintf("TCP connect %s: Success", c.TCP)
	}
	req, err := http.NewRequest(c.Method, c.HTTP, strings.NewReader(c.body))
	if err != nil {
		return "critical", err.Error()
	}
	for k, vs := range c.header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "Consul Health Check")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "text/plain, text/*, */*")
	}
	tr := &http.Transport{DisableKeepAlives: true}
	if c.tlsSkipVerify {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	client := &http.Client{Timeout: c.Timeout, Transport: tr}
	resp, err := client.Do(req)
	if err != nil {
		return "critical", err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxCheckOutput))
	output = fmt.Sprintf("HTTP %s %s: %s Output: %s", c.Method, c.HTTP, resp.Status, body)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		return "passing", output
	case resp.StatusCode == http.StatusTooManyRequests:
		return "warning", output
	default:
		return "critical", output
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
		// The service's checks are those of this registration alone.
		for id, c := range a.checks {
			if c.ServiceID == body.ID {
				a.removeCheck(id)
			}
		}
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
	switch body.Status {
	case "passing", "warning", "critical":
	default:
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
