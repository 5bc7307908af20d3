package fakeconsul

// Agent checks: registered alone or with a service, validated as Consul
// does, TTL checks fed by their workload, HTTP and TCP checks run by the
// agent every Interval.

import (
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// How Consul's agent runs checks.
const (
	minCheckInterval    = time.Second      // a shorter interval is raised to it
	defaultCheckTimeout = 10 * time.Second // an HTTP or TCP probe's
	maxCheckOutput      = 4 << 10          // of an HTTP check's body
)

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

// validStatus reports whether s is a check status Consul takes.
func validStatus(s string) bool { return s == "passing" || s == "warning" || s == "critical" }

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
	c := &Check{ID: id, Name: d.Name, ServiceID: serviceID, Status: d.Status,
		HTTP: d.HTTP, TCP: d.TCP, Method: d.Method, header: d.Header, body: d.Body,
		tlsSkipVerify: d.TLSSkipVerify, updated: a.s.clock.Now()}
	if c.Status == "" {
		c.Status = "critical"
	}
	if !validStatus(c.Status) {
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
