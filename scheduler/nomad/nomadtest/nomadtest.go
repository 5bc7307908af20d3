// Package nomadtest is a fake of the few Nomad HTTP API endpoints the
// nomad-train backend uses, served over real HTTP (httptest) so the real
// nomad/api client talks to it. A job's allocations and evaluations follow
// a recorded script of steps: each blocking query that asks for a newer
// index than the current step moves the script one step on, once both lists
// have been taken in at the current step (both watchers ask for more).
//
//	srv := nomadtest.New(t)
//	steps, _ := nomadtest.LoadRecording("testdata/gang-complete.json")
//	srv.Script("mnist", steps)
//	c, _ := nomad.NewClient(nomad.Config{Address: srv.URL})
package nomadtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Step is one recorded moment of a job: the bodies of
// GET /v1/job/<id>/allocations and /v1/job/<id>/evaluations.
type Step struct {
	Allocations []*api.AllocationListStub
	Evaluations []*api.Evaluation
}

// Recording is a recorded sequence of steps, as stored in testdata.
type Recording struct {
	Description string
	Job         string
	Steps       []Step
}

// LoadRecording reads a recording file.
func LoadRecording(path string) (*Recording, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading recording: %w", err)
	}
	var r Recording
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decoding recording %s: %w", path, err)
	}
	return &r, nil
}

// maxBlock caps how long the fake holds a blocking query.
const maxBlock = 200 * time.Millisecond

// Server is the fake Nomad agent.
type Server struct {
	// URL is the agent's address, for NOMAD_ADDR or -address.
	URL string
	srv *httptest.Server

	mu sync.Mutex
	// guarded by mu:
	jobs         map[string]*api.Job
	stopped      map[string]bool // job ID -> purged
	finished     map[string]map[string]api.TaskGroupSummary
	vars         map[string]*api.Variable
	scripts      map[string]*script
	planFailures []map[string]*api.AllocationMetric
	logs         map[string]string
	requests     []string
	registered   []string        // job IDs, once per registration
	tokens       map[string]bool // X-Nomad-Token values seen
	namespaces   map[string]bool // namespace parameters seen
	// index is the Raft index of the last registration. It starts below
	// the create indexes of the recordings, and what a Node places after
	// a registration is created past it, as on a real agent.
	index uint64
	// nodes are the client nodes of the capacity model (capacity.go).
	nodes []*api.NodeListStub

	// onRegister, when set, runs in each registration once the job is
	// stored, before the answer.
	onRegister func()
}

// firstIndex is the index before the first registration.
const firstIndex = 9

type script struct {
	steps []Step
	cur   int
	// waitIdx is the index each list's pending blocking query waits past
	// (0: none): the script moves on when both wait past the current step,
	// that is when the client has taken in both answers for it.
	waitIdx [2]uint64
}

// New starts a fake agent that closes when the test ends.
func New(t testing.TB) *Server {
	s := &Server{
		jobs: map[string]*api.Job{}, stopped: map[string]bool{}, vars: map[string]*api.Variable{},
		finished: map[string]map[string]api.TaskGroupSummary{}, scripts: map[string]*script{}, logs: map[string]string{},
		tokens: map[string]bool{}, namespaces: map[string]bool{}, index: firstIndex,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs", s.listJobs)
	for _, m := range []string{"PUT", "POST"} { // nomad/api writes with either
		mux.HandleFunc(m+" /v1/jobs", s.register)
		mux.HandleFunc(m+" /v1/job/{id}/plan", s.plan)
		mux.HandleFunc(m+" /v1/var/{path...}", s.putVar)
	}
	mux.HandleFunc("GET /v1/job/{id}", s.jobInfo)
	mux.HandleFunc("DELETE /v1/job/{id}", s.deregister)
	mux.HandleFunc("GET /v1/job/{id}/allocations", s.list(false))
	mux.HandleFunc("GET /v1/job/{id}/evaluations", s.list(true))
	mux.HandleFunc("GET /v1/allocation/{id}", s.allocInfo)
	mux.HandleFunc("GET /v1/nodes", s.listNodes)
	mux.HandleFunc("GET /v1/client/fs/logs/{id}", s.streamLogs)
	mux.HandleFunc("DELETE /v1/var/{path...}", s.deleteVar)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		s.tokens[r.Header.Get("X-Nomad-Token")] = true
		s.namespaces[r.URL.Query().Get("namespace")] = true
		s.mu.Unlock()
		w.Header().Set("X-Nomad-LastContact", "0")
		w.Header().Set("X-Nomad-KnownLeader", "true")
		mux.ServeHTTP(w, r)
	}))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

// Script makes jobID's allocations and evaluations follow steps.
func (s *Server) Script(jobID string, steps []Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts[jobID] = &script{steps: steps}
}

// Seek moves jobID's script to step i, as if time had passed.
func (s *Server) Seek(jobID string, i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.scripts[jobID]
	sc.cur = min(i, len(sc.steps)-1)
}

// AddJob stores a job as if it had been registered.
func (s *Server) AddJob(job *api.Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs[*job.ID] = job
}

// Finish makes the job list show job id as dead, not stopped, with these
// allocation counts per task group in its summary.
func (s *Server) Finish(id string, summary map[string]api.TaskGroupSummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished[id] = summary
}

// FailPlans makes the next len(failures) plans report these placement
// failures (FailedTGAllocs).
func (s *Server) FailPlans(failures ...map[string]*api.AllocationMetric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.planFailures = append(s.planFailures, failures...)
}

// SetLogs sets what a task's stdout or stderr holds.
func (s *Server) SetLogs(allocID, stream, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logs[allocID+"/"+stream] = text
}

// Requests returns "METHOD /path" for every request served so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// Registered returns the ID of the job of every registration so far, in
// order.
func (s *Server) Registered() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.registered...)
}

// SawToken reports whether any request carried this ACL token.
func (s *Server) SawToken(token string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens[token]
}

// SawNamespace reports whether any request asked for this namespace.
func (s *Server) SawNamespace(ns string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.namespaces[ns]
}

// Job returns a registered job, or nil.
func (s *Server) Job(id string) *api.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[id]
}

// Stopped reports whether the job was deregistered, and with purge.
func (s *Server) Stopped(id string) (stopped, purged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	purged, stopped = s.stopped[id]
	return stopped, purged
}

// Variable returns a stored variable, or nil.
func (s *Server) Variable(path string) *api.Variable {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vars[path]
}

func reply(w http.ResponseWriter, index uint64, v any) {
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(index, 10))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	// Like a real agent, the stubs carry the jobs' meta only when asked
	// with meta=true.
	withMeta := r.URL.Query().Get("meta") == "true"
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*api.JobListStub{}
	for id, j := range s.jobs {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		stub := &api.JobListStub{ID: id, Name: id, Type: "batch", Status: s.jobStatusLocked(id),
			JobSummary: &api.JobSummary{JobID: id, Summary: map[string]api.TaskGroupSummary{}}}
		if _, ok := s.stopped[id]; ok {
			stub.Stop = true
		} else if sum, ok := s.finished[id]; ok {
			stub.JobSummary.Summary = sum
		}
		if withMeta {
			stub.Meta = j.Meta
		}
		out = append(out, stub)
	}
	reply(w, 1, out)
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var req api.JobRegisterRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Job == nil || req.Job.ID == nil {
		http.Error(w, "bad job", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.index++
	index := s.index
	req.Job.JobModifyIndex = &index
	s.jobs[*req.Job.ID] = req.Job
	s.registered = append(s.registered, *req.Job.ID)
	delete(s.stopped, *req.Job.ID)
	delete(s.finished, *req.Job.ID) // registered anew: no longer dead
	hook := s.onRegister
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	reply(w, index, api.JobRegisterResponse{EvalID: "eval-" + *req.Job.ID, JobModifyIndex: index})
}

// nextIndex is a fresh Raft index, past every registration so far.
func (s *Server) nextIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	return s.index
}

func (s *Server) jobInfo(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	j := s.jobs[id]
	status := s.jobStatusLocked(id)
	s.mu.Unlock()
	if j == nil {
		http.Error(w, "job not found", http.StatusNotFound)
		return
	}
	c := *j // a real agent reports the job's status
	c.Status = &status
	reply(w, 10, &c)
}

// jobStatusLocked is the status a real agent reports for job id, from its
// allocations and evaluations as of the script's current step: "dead"
// once stopped or finished; "running" while an allocation is not
// terminal; else "pending" while an evaluation is not (a blocked gang),
// or when the job has neither yet (registered, not evaluated), and
// "dead" otherwise. s.mu is held.
func (s *Server) jobStatusLocked(id string) string {
	if _, ok := s.stopped[id]; ok {
		return "dead"
	}
	if _, ok := s.finished[id]; ok {
		return "dead"
	}
	sc := s.scripts[id]
	if sc == nil || len(sc.steps) == 0 {
		return "pending"
	}
	step := sc.steps[sc.cur]
	for _, a := range step.Allocations {
		if a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning {
			return "running"
		}
	}
	for _, e := range step.Evaluations {
		if e.Status == "pending" || e.Status == "blocked" {
			return "pending"
		}
	}
	if len(step.Allocations) == 0 && len(step.Evaluations) == 0 {
		return "pending"
	}
	return "dead"
}

func (s *Server) deregister(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	_, ok := s.jobs[id]
	if ok {
		s.stopped[id] = r.URL.Query().Get("purge") == "true"
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, "job not found", http.StatusNotFound)
		return
	}
	reply(w, 11, api.JobDeregisterResponse{EvalID: "eval-stop-" + id})
}

func (s *Server) plan(w http.ResponseWriter, r *http.Request) {
	var req api.JobPlanRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Job == nil {
		http.Error(w, "bad job", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	var failed map[string]*api.AllocationMetric
	if len(s.planFailures) > 0 {
		failed, s.planFailures = s.planFailures[0], s.planFailures[1:]
	} else {
		failed = s.shortLocked(req.Job)
	}
	s.mu.Unlock()
	reply(w, 9, api.JobPlanResponse{JobModifyIndex: 9, FailedTGAllocs: failed})
}

// list serves a job's scripted allocations or evaluations as a blocking
// query; the index is the step number plus one.
func (s *Server) list(evals bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		want, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
		deadline := time.Now().Add(maxBlock)
		for {
			s.mu.Lock()
			sc := s.scripts[id]
			if sc == nil || len(sc.steps) == 0 {
				s.mu.Unlock()
				if evals {
					reply(w, 1, []*api.Evaluation{})
				} else {
					reply(w, 1, []*api.AllocationListStub{})
				}
				return
			}
			kind := 0
			if evals {
				kind = 1
			}
			if idx := uint64(sc.cur + 1); want >= idx {
				sc.waitIdx[kind] = want
				if sc.waitIdx[0] >= idx && sc.waitIdx[1] >= idx && sc.cur+1 < len(sc.steps) {
					sc.cur++
				}
			}
			if want < uint64(sc.cur+1) || time.Now().After(deadline) || r.Context().Err() != nil {
				step := sc.steps[sc.cur]
				idx := uint64(sc.cur + 1)
				sc.waitIdx[kind] = 0
				s.mu.Unlock()
				if evals {
					reply(w, idx, step.Evaluations)
				} else {
					reply(w, idx, step.Allocations)
				}
				return
			}
			s.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// findAlloc returns the scripted stub with this ID as of the current
// step, or from a later step when it has not appeared yet.
func (s *Server) findAlloc(id string) *api.AllocationListStub {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.scripts {
		order := make([]int, 0, len(sc.steps))
		for i := sc.cur; i >= 0; i-- {
			order = append(order, i)
		}
		for i := sc.cur + 1; i < len(sc.steps); i++ {
			order = append(order, i)
		}
		for _, i := range order {
			for _, a := range sc.steps[i].Allocations {
				if a.ID == id {
					return a
				}
			}
		}
	}
	return nil
}

func (s *Server) allocInfo(w http.ResponseWriter, r *http.Request) {
	a := s.findAlloc(r.PathValue("id"))
	if a == nil {
		http.Error(w, "alloc not found", http.StatusNotFound)
		return
	}
	// A stub's fields are a subset of an Allocation's, with the same names.
	reply(w, a.ModifyIndex, a)
}

func (s *Server) streamLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	text, ok := s.logs[r.PathValue("id")+"/"+q.Get("type")]
	s.mu.Unlock()
	if !ok {
		http.Error(w, "no such task", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	for line := range strings.SplitAfterSeq(text, "\n") {
		if line != "" {
			_ = enc.Encode(api.StreamFrame{Data: []byte(line), File: "alloc/logs/" + q.Get("task") + "." + q.Get("type") + ".0"})
		}
	}
}

func (s *Server) putVar(w http.ResponseWriter, r *http.Request) {
	var v api.Variable
	if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
		http.Error(w, "bad variable", http.StatusBadRequest)
		return
	}
	v.Path = r.PathValue("path")
	s.mu.Lock()
	s.vars[v.Path] = &v
	s.mu.Unlock()
	reply(w, 12, v)
}

func (s *Server) deleteVar(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	delete(s.vars, r.PathValue("path"))
	s.mu.Unlock()
	w.Header().Set("X-Nomad-Index", "13")
	w.WriteHeader(http.StatusNoContent)
}
