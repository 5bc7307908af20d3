package fakeconsul

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// /v1/kv: reads (blocking queries, recurse), writes (cas, acquire,
// release) and deletes.

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
