package fakeconsul

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// /v1/txn: KV operations applied all or none, as Consul does.

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
