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
//   - agent services with TTL checks, critical unless given a Status, and
//     critical once TTL passes without /v1/agent/check/update;
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
	"sort"
	"strconv"
	"strings"
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

	// lifeMu serialises Stop, Start and Close.
	lifeMu sync.Mutex
	// guarded by lifeMu:
	srv *http.Server // nil while stopped

	mu sync.Mutex
	// guarded by mu:
	index     uint64
	kvIndex   uint64 // last index at which the KV table changed
	kv        map[string]*entry
	tombs     map[string]uint64
	sessions  map[string]*session
	delayed   map[string]time.Time // key -> end of its lock delay
	services  map[string]Service
	checks    map[string]*Check
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

// Service is a registered agent service.
type Service struct {
	ID, Name, Address string
	Port              int
	CheckIDs          []string
}

// Check is an agent TTL check.
type Check struct {
	ID, ServiceID string
	TTL           time.Duration
	Status        string
	Output        string
	Updates       int
	updated       time.Time
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
	s.resetLocked()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status/leader", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, 0, "127.0.0.1:8300")
	})
	mux.HandleFunc("/v1/kv/", s.handleKV)
	mux.HandleFunc("PUT /v1/txn", s.handleTxn)
	mux.HandleFunc("PUT /v1/session/create", s.handleSessionCreate)
	mux.HandleFunc("PUT /v1/session/renew/{id}", s.handleSessionRenew)
	mux.HandleFunc("PUT /v1/session/destroy/{id}", s.handleSessionDestroy)
	mux.HandleFunc("GET /v1/session/info/{id}", s.handleSessionInfo)
	mux.HandleFunc("PUT /v1/agent/service/register", s.handleServiceRegister)
	mux.HandleFunc("PUT /v1/agent/service/deregister/{id}", s.handleServiceDeregister)
	mux.HandleFunc("PUT /v1/agent/check/update/{id}", s.handleCheckUpdate)
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("fakeconsul: listen: %v", err))
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	return s
}

// resetLocked empties the agent, as a dev agent starts: indexes start at
// 10 (a raft log never starts at 0).
func (s *Server) resetLocked() {
	s.index, s.kvIndex = 10, 10
	s.kv = make(map[string]*entry)
	s.tombs = make(map[string]uint64)
	s.sessions = make(map[string]*session)
	s.delayed = make(map[string]time.Time)
	s.services = make(map[string]Service)
	s.checks = make(map[string]*Check)
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

// Close stops the server for good, ending pending blocking queries.
func (s *Server) Close() { s.Stop() }

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

// Service returns the agent service id, if registered.
func (s *Server) Service(id string) (Service, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	svc, ok := s.services[id]
	return svc, ok
}

// CheckState returns the check id as the agent sees it now (a TTL check
// not updated within its TTL is critical).
func (s *Server) CheckState(id string) (Check, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.checks[id]
	if !ok {
		return Check{}, false
	}
	s.expireCheckLocked(c)
	return *c, true
}

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

func (s *Server) handleKV(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/v1/kv/")
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet:
		s.kvGet(w, r, key, q.Has("recurse"))
	case http.MethodPut:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeText(w, http.StatusBadRequest, err.Error())
			return
		}
		ok, err := s.kvPut(key, body, q)
		if err != nil {
			writeText(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, 0, ok)
	case http.MethodDelete:
		s.mu.Lock()
		if q.Has("recurse") {
			for k := range s.kv {
				if strings.HasPrefix(k, key) {
					s.deleteLocked(k)
				}
			}
		} else {
			s.deleteLocked(key)
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, 0, true)
	default:
		writeText(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

// readLocked is a KV read: the entries and the X-Consul-Index.
func (s *Server) readLocked(key string, recurse bool) ([]entry, uint64) {
	if !recurse {
		if e, ok := s.kv[key]; ok {
			return []entry{*e}, e.ModifyIndex
		}
		return nil, max(s.kvIndex, 1)
	}
	var out []entry
	var idx uint64
	for k, e := range s.kv {
		if strings.HasPrefix(k, key) {
			out = append(out, *e)
			idx = max(idx, e.ModifyIndex)
		}
	}
	for k, d := range s.tombs {
		if strings.HasPrefix(k, key) {
			idx = max(idx, d)
		}
	}
	if idx == 0 {
		idx = s.kvIndex
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, max(idx, 1)
}

func (s *Server) kvGet(w http.ResponseWriter, r *http.Request, key string, recurse bool) {
	q := r.URL.Query()
	minIndex, _ := strconv.ParseUint(q.Get("index"), 10, 64)
	wait := defaultWait
	if ws := q.Get("wait"); ws != "" {
		if d, err := time.ParseDuration(ws); err == nil {
			wait = min(d, maxWait)
		}
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var spurious <-chan time.Time
	if minIndex > 0 && s.Spurious.Load() {
		spurious = time.After(10 * time.Millisecond)
	}
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			writeText(w, http.StatusServiceUnavailable, "agent shutting down")
			return
		}
		out, idx := s.readLocked(key, recurse)
		changed := s.changed
		s.mu.Unlock()
		if minIndex == 0 || idx > minIndex {
			s.answerKV(w, out, idx)
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			s.answerKV(w, out, idx)
			return
		case <-spurious:
			s.answerKV(w, out, idx)
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) answerKV(w http.ResponseWriter, out []entry, idx uint64) {
	if len(out) == 0 {
		w.Header().Set("X-Consul-Index", strconv.FormatUint(idx, 10))
		writeText(w, http.StatusNotFound, "")
		return
	}
	writeJSON(w, http.StatusOK, idx, out)
}

func (s *Server) kvPut(key string, body []byte, q map[string][]string) (bool, error) {
	get := func(k string) (string, bool) {
		v, ok := q[k]
		if !ok || len(v) == 0 {
			return "", ok
		}
		return v[0], true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := get("acquire"); ok {
		return s.acquireLocked(key, body, id)
	}
	if id, ok := get("release"); ok {
		e := s.kv[key]
		if e == nil || e.Session != id {
			return false, nil
		}
		delete(s.sessions[id].keys, key)
		s.setLocked(key, body, "")
		return true, nil
	}
	if c, ok := get("cas"); ok {
		want, err := strconv.ParseUint(c, 10, 64)
		if err != nil {
			return false, fmt.Errorf("invalid cas index %q", c)
		}
		return s.casLocked(key, body, want), nil
	}
	s.setLocked(key, body, s.sessionOf(key))
	return true, nil
}

func (s *Server) sessionOf(key string) string {
	if e := s.kv[key]; e != nil {
		return e.Session
	}
	return ""
}

func (s *Server) casLocked(key string, body []byte, want uint64) bool {
	var cur uint64
	if e := s.kv[key]; e != nil {
		cur = e.ModifyIndex
	}
	if cur != want {
		return false
	}
	s.setLocked(key, body, s.sessionOf(key))
	return true
}

// setLocked writes key. Like Consul's kvsSetTxn, a write that changes
// nothing (same value and session) is skipped: the ModifyIndex stays.
func (s *Server) setLocked(key string, body []byte, sess string) *entry {
	return s.setAtLocked(key, body, sess, 0)
}

// setAtLocked is setLocked at index idx, already taken for a transaction
// (0: take the next).
func (s *Server) setAtLocked(key string, body []byte, sess string, idx uint64) *entry {
	e := s.kv[key]
	if e != nil && bytes.Equal(e.Value, body) && e.Session == sess {
		return e
	}
	if idx == 0 {
		idx = s.bumpKV()
	}
	if e == nil {
		e = &entry{Key: key, CreateIndex: idx}
		s.kv[key] = e
	}
	e.Value = append([]byte(nil), body...)
	e.ModifyIndex = idx
	e.Session = sess
	delete(s.tombs, key)
	return e
}

func (s *Server) acquireLocked(key string, body []byte, id string) (bool, error) {
	se, ok := s.sessions[id]
	if !ok {
		//lint:ignore ST1005 Consul's own wording, which the store matches
		return false, fmt.Errorf("Invalid session %q", id)
	}
	if until, ok := s.delayed[key]; ok && s.clock.Now().Before(until) {
		return false, nil
	}
	e := s.kv[key]
	if e != nil && e.Session != "" && e.Session != id {
		return false, nil
	}
	fresh := e == nil || e.Session != id
	e = s.setLocked(key, body, id)
	if fresh {
		e.LockIndex++
	}
	se.keys[key] = struct{}{}
	return true, nil
}

func (s *Server) deleteLocked(key string) {
	e, ok := s.kv[key]
	if !ok {
		return
	}
	if e.Session != "" {
		if se := s.sessions[e.Session]; se != nil {
			delete(se.keys, key)
		}
	}
	delete(s.kv, key)
	s.tombs[key] = s.bumpKV()
}

// ---- transactions (KV verbs cas, lock, get, get-tree, check-index, check-not-exists) ----

type txnOp struct {
	KV *struct {
		Verb    string
		Key     string
		Value   []byte
		Index   uint64
		Session string
	}
}

type txnError struct {
	OpIndex int
	What    string
}

// handleTxn follows Consul: lock delays are checked before anything else,
// then every op is tried in order and all errors are collected; with any
// error nothing is written and the answer is 409 with the errors. The
// writes of a transaction share one index; write results come without
// their values, read results with them.
func (s *Server) handleTxn(w http.ResponseWriter, r *http.Request) {
	var ops []txnOp
	if err := json.NewDecoder(r.Body).Decode(&ops); err != nil {
		writeText(w, http.StatusBadRequest, "failed to parse body: "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []txnError
	for i, op := range ops {
		if op.KV == nil {
			writeText(w, http.StatusBadRequest, "fake: only KV operations")
			return
		}
		if until, ok := s.delayed[op.KV.Key]; op.KV.Verb == "lock" && ok && s.clock.Now().Before(until) {
			errs = append(errs, txnError{i, fmt.Sprintf("failed to lock key %q due to lock delay", op.KV.Key)})
		}
	}
	if len(errs) > 0 {
		writeJSON(w, http.StatusConflict, 0, map[string]any{"Results": nil, "Errors": errs})
		return
	}
	// Check every op first, so a failed transaction changes nothing (the
	// ops of one transaction name distinct keys, as the store's do).
	writes := false
	for i, op := range ops {
		kv := op.KV
		e := s.kv[kv.Key]
		fail := func(format string, args ...any) { errs = append(errs, txnError{i, fmt.Sprintf(format, args...)}) }
		switch kv.Verb {
		case "cas":
			writes = true
			if (e == nil && kv.Index != 0) || (e != nil && e.ModifyIndex != kv.Index) {
				fail("failed to set key %q, index is stale", kv.Key)
			}
		case "lock":
			writes = true
			switch {
			case kv.Session == "":
				fail("missing session")
			case s.sessions[kv.Session] == nil:
				fail("invalid session %q", kv.Session)
			case e != nil && e.Session != "" && e.Session != kv.Session:
				fail("failed to lock key %q, lock is already held", kv.Key)
			}
		case "get":
			if e == nil {
				fail("key %q doesn't exist", kv.Key)
			}
		case "check-index":
			switch {
			case e == nil:
				fail("failed to check index, key %q doesn't exist", kv.Key)
			case e.ModifyIndex != kv.Index:
				fail("failed index check for key %q, current modify index %d != %d", kv.Key, e.ModifyIndex, kv.Index)
			}
		case "check-not-exists":
			if e != nil {
				fail("key %q exists", kv.Key)
			}
		case "get-tree":
		default:
			writeText(w, http.StatusBadRequest, "fake: unsupported verb "+kv.Verb)
			return
		}
	}
	if len(errs) > 0 {
		writeJSON(w, http.StatusConflict, 0, map[string]any{"Results": nil, "Errors": errs})
		return
	}
	var idx uint64
	if writes {
		idx = s.bumpKV()
	}
	type result struct{ KV entry }
	var results []result
	blank := func(e *entry) result {
		c := *e
		c.Value = nil // Consul blanks the value of write and check results
		return result{c}
	}
	for _, op := range ops {
		kv := op.KV
		e := s.kv[kv.Key]
		switch kv.Verb {
		case "cas":
			results = append(results, blank(s.setAtLocked(kv.Key, kv.Value, e.sessionOrEmpty(), idx)))
		case "lock":
			fresh := e == nil || e.Session != kv.Session
			e = s.setAtLocked(kv.Key, kv.Value, kv.Session, idx)
			if fresh {
				e.LockIndex++
			}
			s.sessions[kv.Session].keys[kv.Key] = struct{}{}
			results = append(results, blank(e))
		case "get":
			results = append(results, result{*e})
		case "check-index":
			results = append(results, blank(e))
		case "get-tree":
			out, _ := s.readLocked(kv.Key, true)
			for _, e := range out {
				results = append(results, result{e})
			}
		}
	}
	writeJSON(w, http.StatusOK, s.index, map[string]any{"Results": results, "Errors": nil})
}

func (e *entry) sessionOrEmpty() string {
	if e == nil {
		return ""
	}
	return e.Session
}

// ---- sessions ----

func (s *Server) handleSessionCreate(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name       string
		TTL        string
		Behavior   string
		LockDelay  json.RawMessage
		NodeChecks []string
		Checks     []string
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeText(w, http.StatusBadRequest, "request decode failed: "+err.Error())
			return
		}
	}
	info := SessionInfo{ID: newUUID(), Name: body.Name, Behavior: body.Behavior, LockDelay: DefaultLockDelay}
	if info.Behavior == "" {
		info.Behavior = "release"
	}
	if info.Behavior != "release" && info.Behavior != "delete" {
		writeText(w, http.StatusBadRequest, "Invalid Behavior setting '"+info.Behavior+"'")
		return
	}
	switch {
	case body.NodeChecks != nil:
		info.NodeChecks = body.NodeChecks
	case body.Checks != nil:
		info.NodeChecks = body.Checks
	default:
		info.NodeChecks = []string{"serfHealth"}
	}
	if len(body.LockDelay) > 0 {
		d, err := parseLockDelay(body.LockDelay)
		if err != nil {
			writeText(w, http.StatusBadRequest, err.Error())
			return
		}
		info.LockDelay = min(d, maxLockDelay)
	}
	if body.TTL != "" {
		ttl, err := time.ParseDuration(body.TTL)
		if err != nil {
			writeText(w, http.StatusBadRequest, "Request decode failed: "+err.Error())
			return
		}
		if ttl != 0 && (ttl < s.minTTL || ttl > maxTTL) {
			writeText(w, http.StatusBadRequest, fmt.Sprintf("Invalid Session TTL '%d', must be between [%v=%v]", ttl, s.minTTL, maxTTL))
			return
		}
		info.TTL = ttl
	}
	s.mu.Lock()
	se := &session{info: info, keys: make(map[string]struct{})}
	s.sessions[info.ID] = se
	s.createdBy[info.ID] = info
	s.index++
	s.armLocked(se)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, 0, map[string]string{"ID": info.ID})
}

// parseLockDelay reads a duration string, or a number: seconds below 1000,
// nanoseconds otherwise (Consul's FixupLockDelay).
func parseLockDelay(raw json.RawMessage) (time.Duration, error) {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return time.ParseDuration(str)
	}
	var n float64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, fmt.Errorf("invalid LockDelay %s", raw)
	}
	if n < 1000 {
		return time.Duration(n * float64(time.Second)), nil
	}
	return time.Duration(n), nil
}

// armLocked (re)starts the session's timer at 2×TTL, as Consul does.
func (s *Server) armLocked(se *session) {
	if se.info.TTL == 0 {
		return
	}
	if se.timer != nil {
		se.timer.Stop()
	}
	id := se.info.ID
	se.timer = s.clock.AfterFunc(2*se.info.TTL, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if cur := s.sessions[id]; cur == se {
			s.invalidateLocked(se)
		}
	})
}

// invalidateLocked ends a session: its keys are deleted or released, and
// put under its lock delay.
func (s *Server) invalidateLocked(se *session) {
	if se.timer != nil {
		se.timer.Stop()
	}
	delete(s.sessions, se.info.ID)
	keys := make([]string, 0, len(se.keys))
	for k := range se.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	until := s.clock.Now().Add(se.info.LockDelay)
	for _, k := range keys {
		if se.info.LockDelay > 0 {
			s.delayed[k] = until
		}
		if se.info.Behavior == "delete" {
			s.deleteLocked(k)
		} else if e := s.kv[k]; e != nil {
			s.setLocked(k, e.Value, "")
		}
	}
	s.index++
}

func (s *Server) handleSessionRenew(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	se, ok := s.sessions[id]
	if ok {
		s.armLocked(se)
	}
	s.mu.Unlock()
	if !ok {
		writeText(w, http.StatusNotFound, fmt.Sprintf("Session id '%s' not found", id))
		return
	}
	writeJSON(w, http.StatusOK, 0, []map[string]any{sessionJSON(se.info)})
}

func sessionJSON(info SessionInfo) map[string]any {
	return map[string]any{
		"ID": info.ID, "Name": info.Name, "TTL": info.TTL.String(), "Behavior": info.Behavior,
		"LockDelay": info.LockDelay, "NodeChecks": info.NodeChecks,
	}
}

func (s *Server) handleSessionDestroy(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if se, ok := s.sessions[r.PathValue("id")]; ok {
		s.invalidateLocked(se)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, 0, true)
}

func (s *Server) handleSessionInfo(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	se, ok := s.sessions[r.PathValue("id")]
	idx := s.index
	s.mu.Unlock()
	out := []map[string]any{}
	if ok {
		out = append(out, sessionJSON(se.info))
	}
	writeJSON(w, http.StatusOK, idx, out)
}

// ---- agent services and checks ----

type checkDef struct {
	CheckID string
	Name    string
	TTL     string
	Status  string
}

func (s *Server) handleServiceRegister(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ID, Name, Address string
		Port              int
		Check             *checkDef
		Checks            []*checkDef
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeText(w, http.StatusBadRequest, "Request decode failed: "+err.Error())
		return
	}
	if body.Name == "" {
		writeText(w, http.StatusBadRequest, "Missing service name")
		return
	}
	if body.ID == "" {
		body.ID = body.Name
	}
	defs := body.Checks
	if body.Check != nil {
		defs = append([]*checkDef{body.Check}, defs...)
	}
	svc := Service{ID: body.ID, Name: body.Name, Address: body.Address, Port: body.Port}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.services[body.ID]; ok && r.URL.Query().Get("replace-existing-checks") == "true" {
		for _, id := range old.CheckIDs {
			delete(s.checks, id)
		}
	}
	for i, d := range defs {
		id := d.CheckID
		if id == "" {
			id = "service:" + body.ID
			if len(defs) > 1 {
				id = fmt.Sprintf("service:%s:%d", body.ID, i+1)
			}
		}
		ttl, err := time.ParseDuration(d.TTL)
		if err != nil || ttl <= 0 {
			writeText(w, http.StatusBadRequest, "fake: only TTL checks, got TTL "+strconv.Quote(d.TTL))
			return
		}
		status := d.Status
		if status == "" {
			status = "critical"
		}
		s.checks[id] = &Check{ID: id, ServiceID: body.ID, TTL: ttl, Status: status, updated: s.clock.Now()}
		svc.CheckIDs = append(svc.CheckIDs, id)
	}
	s.services[body.ID] = svc
	s.index++
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleServiceDeregister(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	svc, ok := s.services[id]
	if !ok {
		writeText(w, http.StatusNotFound, "Unknown service ID "+strconv.Quote(id))
		return
	}
	for _, c := range svc.CheckIDs {
		delete(s.checks, c)
	}
	delete(s.services, id)
	s.index++
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleCheckUpdate(w http.ResponseWriter, r *http.Request) {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.checks[id]
	if !ok {
		writeText(w, http.StatusNotFound, "Unknown check ID "+strconv.Quote(id))
		return
	}
	c.Status, c.Output, c.updated = body.Status, body.Output, s.clock.Now()
	c.Updates++
	w.WriteHeader(http.StatusOK)
}

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
