package fakeconsul

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// /v1/session: sessions with TTLs and lock delays.

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
