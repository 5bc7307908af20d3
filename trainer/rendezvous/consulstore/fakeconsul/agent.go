package fakeconsul

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// /v1/agent: services and their TTL checks.

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
