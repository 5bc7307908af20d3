// Package fakeconsul is an in-process Consul HTTP API with the handful of
// endpoints the rendezvous store and worker health use, so tests run
// without a Consul agent. It follows Consul's documented behaviour where
// the store depends on it:
//
//   - one raft-like index for every write; a KV read answers with
//     X-Consul-Index (the key's ModifyIndex, or the KV table index when it
//     is absent; for a list, the highest ModifyIndex or tombstone under the
//     prefix), at least 1;
//   - blocking queries (?index=&wait=) return when that index exceeds the
//     one given, or when the wait ends with it unchanged; Spurious makes
//     them return early, unchanged, and ReapTombstones makes list indexes
//     go backwards, as Consul's tombstone reaping does;
//   - PUT ?cas=0 creates only, ?cas=N needs ModifyIndex N, and the answer
//     is "true" or "false"; a write of the value already there succeeds
//     without a new ModifyIndex;
//   - /v1/txn with the KV verbs cas, lock, get, get-tree, check-index and
//     check-not-exists: all or nothing, 409 with Consul's error texts ("index
//     is stale", "lock is already held", "due to lock delay", ...), one
//     index for the transaction's writes;
//   - sessions: TTL between MinTTL (session_ttl_min, default 10s) and 24h,
//     invalidated 2×TTL after the last renewal, LockDelay defaulting to 15s
//     when absent, the serfHealth node check unless NodeChecks is given
//     (empty included), behaviour release or delete; ?acquire fails for a
//     key another session holds or that is under lock delay, and names an
//     invalid session with a 500;
//   - agents (the dev agent, and client agents from AddAgent sharing its
//     KV and sessions), each with its own services and checks, as
//     /v1/agent/self, services, checks and the register, deregister and
//     update calls answer them to a Nomad client and a worker: TTL checks
//     critical unless given a Status and once TTL passes without an
//     update; HTTP and TCP checks run by the agent every Interval (at
//     least 1s, the first run staggered over it), passing on a 2xx answer
//     or an open connection, warning on 429, critical otherwise; default
//     weights 1 and 1, tagged addresses added for an IP address; a
//     registration with replace-existing-checks drops the service's
//     checks it does not name;
//   - a client agent whose server is down answers the cluster's endpoints
//     (KV, sessions, transactions) with 500 "No known Consul servers" and
//     keeps serving its own;
//   - pushing back: TooMany makes requests answer 429 with the text of
//     Consul's per-client connection limit (http_max_conns_per_client) and
//     close the connection, as the agent does;
//   - an agent restart: Stop refuses connections on the agent's port, and
//     Start serves it again with nothing in it (no KV, sessions, services
//     or checks, indexes starting low again), as a dev agent comes back.
package fakeconsul

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// Consul's defaults the fake follows.
const (
	DefaultMinTTL    = 10 * time.Second
	DefaultLockDelay = 15 * time.Second
	maxTTL           = 24 * time.Hour
	maxLockDelay     = 60 * time.Second
	defaultWait      = 5 * time.Minute
	maxWait          = 10 * time.Minute
)

// Server is the fake agent. Create it with New.
type Server struct {
	clock   rendezvous.Clock
	minTTL  time.Duration
	addr    string // host:port, the same across Stop and Start
	handler http.Handler

	// Spurious makes every blocking query return after about 10ms with
	// nothing changed.
	Spurious atomic.Bool
	// Requests counts the HTTP requests served.
	Requests atomic.Int64
	// Fail makes that many of the next requests answer 500, as an agent
	// without a leader does.
	Fail atomic.Int64
	// TooMany makes that many of the next requests answer 429 Too Many
	// Requests and close their connection, as an agent over its
	// http_max_conns_per_client does.
	TooMany atomic.Int64

	// lifeMu serialises Stop, Start, AddAgent and Close.
	lifeMu sync.Mutex
	// guarded by lifeMu:
	srv     *http.Server // nil while stopped
	clients []*Agent     // AddAgent's

	// self is the dev agent the Server is; its services and checks are
	// guarded by mu.
	self *Agent

	mu sync.Mutex
	// guarded by mu:
	index     uint64
	kvIndex   uint64 // last index at which the KV table changed
	kv        map[string]*entry
	tombs     map[string]uint64
	sessions  map[string]*session
	delayed   map[string]time.Time // key -> end of its lock delay
	changed   chan struct{}
	closed    bool
	createdBy map[string]SessionInfo
}

type entry struct {
	Key         string
	Value       []byte
	Flags       uint64
	CreateIndex uint64
	ModifyIndex uint64
	LockIndex   uint64
	Session     string `json:",omitempty"`
}

type session struct {
	info  SessionInfo
	timer rendezvous.Timer
	keys  map[string]struct{}
}

// SessionInfo is what a session was created with, for tests to inspect.
type SessionInfo struct {
	ID         string
	Name       string
	TTL        time.Duration
	Behavior   string
	LockDelay  time.Duration
	NodeChecks []string
}

// Options configure New.
type Options struct {
	// Clock drives session TTLs, lock delays and check TTLs (nil: wall
	// clock). Blocking-query waits always use the wall clock.
	Clock rendezvous.Clock
	// MinTTL is session_ttl_min (default DefaultMinTTL).
	MinTTL time.Duration
}

// New starts a fake agent on a loopback port; Close stops it.
func New(opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = rendezvous.RealClock{}
	}
	if opts.MinTTL <= 0 {
		opts.MinTTL = DefaultMinTTL
	}
	s := &Server{clock: opts.Clock, minTTL: opts.MinTTL}
	s.self = newAgent(s, "fake-dev", true)
	s.resetLocked()
	s.handler = s.agentHandler(s.self)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("fakeconsul: listen: %v", err))
	}
	s.addr = ln.Addr().String()
	s.self.addr = s.addr
	s.serve(ln)
	return s
}

// agentHandler serves agent a's API: its own /v1/agent endpoints, and
// the cluster's KV, sessions and transactions, which a client agent
// answers only while the server (the dev agent) is up.
func (s *Server) agentHandler(a *Agent) http.Handler {
	cluster := http.NewServeMux()
	cluster.HandleFunc("GET /v1/status/leader", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, 0, "127.0.0.1:8300")
	})
	cluster.HandleFunc("/v1/kv/", s.handleKV)
	cluster.HandleFunc("PUT /v1/txn", s.handleTxn)
	cluster.HandleFunc("PUT /v1/session/create", s.handleSessionCreate)
	cluster.HandleFunc("PUT /v1/session/renew/{id}", s.handleSessionRenew)
	cluster.HandleFunc("PUT /v1/session/destroy/{id}", s.handleSessionDestroy)
	cluster.HandleFunc("GET /v1/session/info/{id}", s.handleSessionInfo)
	var clusterHandler http.Handler = cluster
	if a != s.self {
		clusterHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			down := s.closed
			s.mu.Unlock()
			if down {
				writeText(w, http.StatusInternalServerError, "No known Consul servers")
				return
			}
			cluster.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/", clusterHandler)
	mux.HandleFunc("GET /v1/agent/self", a.handleSelf)
	mux.HandleFunc("GET /v1/agent/services", a.handleServices)
	mux.HandleFunc("GET /v1/agent/service/{id}", a.handleService)
	mux.HandleFunc("GET /v1/agent/checks", a.handleChecks)
	mux.HandleFunc("PUT /v1/agent/service/register", a.handleServiceRegister)
	mux.HandleFunc("PUT /v1/agent/service/deregister/{id}", a.handleServiceDeregister)
	mux.HandleFunc("PUT /v1/agent/check/register", a.handleCheckRegister)
	mux.HandleFunc("PUT /v1/agent/check/deregister/{id}", a.handleCheckDeregister)
	mux.HandleFunc("PUT /v1/agent/check/update/{id}", a.handleCheckUpdate)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Requests.Add(1)
		if s.TooMany.Add(-1) >= 0 {
			w.Header().Set("Connection", "close")
			writeText(w, http.StatusTooManyRequests, "Your IP is issuing too many concurrent connections, please rate limit your calls\n")
			return
		}
		s.TooMany.Store(0)
		if s.Fail.Add(-1) >= 0 {
			writeText(w, http.StatusInternalServerError, "No cluster leader")
			return
		}
		s.Fail.Store(0)
		mux.ServeHTTP(w, r)
	})
}

// AddAgent starts a client agent of the node named node on a loopback
// port of its own: it shares the Server's KV and sessions and keeps its
// own services and checks, as the Consul agent of another machine. Close
// stops it with the Server.
func (s *Server) AddAgent(node string) (*Agent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fakeconsul: listen: %w", err)
	}
	a := newAgent(s, node, false)
	a.addr = ln.Addr().String()
	a.http = &http.Server{Handler: s.agentHandler(a)}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.clients = append(s.clients, a)
	go a.http.Serve(ln)
	return a, nil
}

// resetLocked empties the agent, as a dev agent starts: indexes start at
// 10 (a raft log never starts at 0).
func (s *Server) resetLocked() {
	s.index, s.kvIndex = 10, 10
	s.kv = make(map[string]*entry)
	s.tombs = make(map[string]uint64)
	s.sessions = make(map[string]*session)
	s.delayed = make(map[string]time.Time)
	s.self.reset()
	s.changed = make(chan struct{})
	s.createdBy = make(map[string]SessionInfo)
	s.closed = false
}

// serve starts answering on ln. The caller holds lifeMu or is New.
func (s *Server) serve(ln net.Listener) {
	srv := &http.Server{Handler: s.handler}
	s.srv = srv
	go srv.Serve(ln)
}

// Addr is the agent's "host:port", for CONSUL_HTTP_ADDR or capi.Config.
func (s *Server) Addr() string { return s.addr }

// Close stops the server and the agents AddAgent made for good, ending
// pending blocking queries.
func (s *Server) Close() {
	s.Stop()
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	for _, a := range s.clients {
		a.http.Close()
		s.mu.Lock()
		a.reset()
		s.mu.Unlock()
	}
	s.clients = nil
}

// Stop takes the agent down, as a stopped or restarting agent: pending
// blocking queries end, open connections are closed, and new ones are
// refused until Start. What the agent held is lost (see Start).
func (s *Server) Stop() {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		for _, se := range s.sessions {
			if se.timer != nil {
				se.timer.Stop()
			}
		}
		for _, c := range s.self.checks {
			c.stop()
		}
		s.wakeLocked()
	}
	s.mu.Unlock()
	if s.srv != nil {
		s.srv.Close()
		s.srv = nil
	}
}

// Start brings a stopped agent back on the same address with nothing in
// it: no keys, sessions, services or checks, and indexes lower than before,
// as a restarted dev agent. It fails when the port was taken meanwhile.
func (s *Server) Start() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.srv != nil {
		return fmt.Errorf("fakeconsul: start %s: already running", s.addr)
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("fakeconsul: start: %w", err)
	}
	s.mu.Lock()
	s.resetLocked()
	s.mu.Unlock()
	s.serve(ln)
	return nil
}

// Session returns what the session id was created with, and whether it is
// still live.
func (s *Server) Session(id string) (SessionInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, live := s.sessions[id]
	return s.createdBy[id], live
}

// KV returns the value of key, if present.
func (s *Server) KV(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.kv[key]
	if !ok {
		return nil, false
	}
	return bytes.Clone(e.Value), true
}

// Service returns the service id registered with the dev agent, if any.
func (s *Server) Service(id string) (Service, bool) { return s.self.Service(id) }

// CheckState returns the dev agent's check id as it sees it now (a TTL
// check not updated within its TTL is critical).
func (s *Server) CheckState(id string) (Check, bool) { return s.self.CheckState(id) }

// ReapTombstones forgets every deletion, as Consul's tombstone GC does;
// list indexes under prefixes whose newest event was a deletion go back.
func (s *Server) ReapTombstones() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tombs)
}

func (s *Server) expireCheckLocked(c *Check) {
	if c.TTL > 0 && c.Status != "critical" && s.clock.Now().Sub(c.updated) > c.TTL {
		c.Status = "critical"
		c.Output = "TTL expired"
	}
}

func (s *Server) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// bumpKV advances the index for a KV change and wakes blocking queries.
func (s *Server) bumpKV() uint64 {
	s.index++
	s.kvIndex = s.index
	s.wakeLocked()
	return s.index
}

func newUUID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func writeJSON(w http.ResponseWriter, code int, index uint64, v any) {
	w.Header().Set("Content-Type", "application/json")
	if index > 0 {
		w.Header().Set("X-Consul-Index", strconv.FormatUint(index, 10))
	}
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

// ---- KV ----

// WaitFor polls cond every 10ms until it holds or ctx ends; it reports
// whether it held.
func WaitFor(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
}
