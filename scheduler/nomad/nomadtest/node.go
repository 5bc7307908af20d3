package nomadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/trainer/launch"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// RunFunc runs a registered job's workers on this machine and returns when
// they have all ended: nil when they succeeded. ctx is cancelled when the
// job is deregistered.
type RunFunc func(ctx context.Context, job *api.Job) error

// Node is a client node in front of a fake Server: it serves the same API
// at its own URL, and when a job is registered through it, it runs the
// job with run and scripts the job's allocations from what happens: every
// worker running from registration on, then every one complete, or failed
// when run returns an error. Deregistering the job cancels run (as Nomad
// sends SIGTERM); its allocations then end complete with desired status
// stop.
//
//	srv := nomadtest.New(t)
//	node := nomadtest.NewNode(t, srv, nomadtest.LocalWorkers(exe, []string{"worker"}, nil))
//	c, _ := nomad.NewClient(nomad.Config{Address: node.URL})
type Node struct {
	// URL is the node's address: use it instead of the server's.
	URL string
	srv *Server
	run RunFunc
	wg  sync.WaitGroup

	mu     sync.Mutex
	gen    uint64                        // guarded by mu: the create index of the latest start
	cancel map[string]context.CancelFunc // guarded by mu: running jobs
	failed []string                      // guarded by mu: "job: error" for each failed run
}

// Failures returns "job: error" for each run of a job that failed, in
// order, for a test to say why an allocation failed.
func (n *Node) Failures() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.failed...)
}

// NewNode starts a node in front of srv; it stops every job it runs when
// the test ends.
func NewNode(t testing.TB, srv *Server, run RunFunc) *Node {
	n := &Node{srv: srv, run: run, cancel: map[string]context.CancelFunc{}}
	target, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatalf("nomadtest: %v", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // blocking queries their client gave up on
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case (r.Method == http.MethodPut || r.Method == http.MethodPost) && r.URL.Path == "/v1/jobs":
			body, err := io.ReadAll(r.Body)
			var req api.JobRegisterRequest
			if err == nil {
				err = json.Unmarshal(body, &req)
			}
			if err != nil || req.Job == nil || req.Job.ID == nil {
				http.Error(w, "bad job", http.StatusBadRequest)
				return
			}
			// Registered first, then placed: its allocations are created
			// after the registration's index, and exist before Register
			// answers. A client that goes away mid-request (a tuner
			// killed) does not stop either, as it does not on a real
			// agent: a registered job is placed.
			r = r.WithContext(context.WithoutCancel(r.Context()))
			r.Body = io.NopCloser(bytes.NewReader(body))
			rec := httptest.NewRecorder()
			proxy.ServeHTTP(rec, r)
			if rec.Code == http.StatusOK {
				n.start(req.Job)
			}
			maps.Copy(w.Header(), rec.Header())
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
		case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/job/"):
			proxy.ServeHTTP(w, r)
			n.mu.Lock()
			if cancel := n.cancel[strings.TrimPrefix(r.URL.Path, "/v1/job/")]; cancel != nil {
				cancel()
			}
			n.mu.Unlock()
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	n.URL = front.URL
	t.Cleanup(func() {
		n.mu.Lock()
		for _, c := range n.cancel {
			c()
		}
		n.mu.Unlock()
		n.wg.Wait()
		front.Close()
	})
	return n
}

// WorkerCount is the size of a job's worker group ("worker").
func WorkerCount(job *api.Job) int {
	for _, g := range job.TaskGroups {
		if g.Name != nil && *g.Name == "worker" && g.Count != nil {
			return *g.Count
		}
	}
	return 1
}

// Allocations returns a step in which each of n workers of job has one
// allocation of generation gen (its create index) in the given states.
func Allocations(job string, n int, gen uint64, client, desired string) Step {
	var as []*api.AllocationListStub
	for r := range n {
		as = append(as, &api.AllocationListStub{ID: fmt.Sprintf("%s-%d-%d", job, gen, r), JobID: job,
			Name: fmt.Sprintf("%s.worker[%d]", job, r), TaskGroup: "worker",
			ClientStatus: client, DesiredStatus: desired, CreateIndex: gen, ModifyIndex: gen})
	}
	return Step{Allocations: as, Evaluations: []*api.Evaluation{}}
}

func (n *Node) start(job *api.Job) {
	id, count := *job.ID, WorkerCount(job)
	gen := n.srv.nextIndex() // created after the job's registration
	n.mu.Lock()
	n.gen = gen
	if old := n.cancel[id]; old != nil {
		old()
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel[id] = cancel
	n.mu.Unlock()
	running := inGroup(job, Allocations(id, count, gen, api.AllocClientStatusRunning, api.AllocDesiredStatusRun))
	placed := n.srv.place(job, running, gen)
	n.wg.Go(func() {
		if !placed && !n.srv.placeWhenFree(ctx.Done(), job, running, gen) {
			// Stopped before it was placed: its blocked evaluation ends
			// and no allocation ever ran.
			n.mu.Lock()
			if n.gen == gen {
				delete(n.cancel, id)
			}
			n.mu.Unlock()
			cancel()
			n.srv.Script(id, []Step{{Allocations: []*api.AllocationListStub{}, Evaluations: []*api.Evaluation{}}})
			return
		}
		err := n.run(ctx, job)
		client, desired := api.AllocClientStatusComplete, api.AllocDesiredStatusRun
		switch {
		case ctx.Err() != nil:
			desired = api.AllocDesiredStatusStop
		case err != nil:
			client = api.AllocClientStatusFailed
		}
		n.mu.Lock()
		if n.gen == gen {
			delete(n.cancel, id)
		}
		if client == api.AllocClientStatusFailed {
			n.failed = append(n.failed, id+": "+err.Error())
		}
		n.mu.Unlock()
		cancel()
		n.srv.Script(id, []Step{inGroup(job, Allocations(id, count, gen, client, desired))})
	})
}

// inGroup puts a step's allocations in the job's task group when it has
// no "worker" group (a job of one other group, such as a detached tuner).
func inGroup(job *api.Job, s Step) Step {
	for _, g := range job.TaskGroups {
		if g.Name != nil && *g.Name == "worker" {
			return s
		}
	}
	if len(job.TaskGroups) == 0 || job.TaskGroups[0].Name == nil {
		return s
	}
	g := *job.TaskGroups[0].Name
	for i, a := range s.Allocations {
		a.TaskGroup, a.Name = g, fmt.Sprintf("%s.%s[%d]", *job.ID, g, i)
	}
	return s
}

// LocalWorkers is a RunFunc that runs a job's workers as the train driver
// would, as local processes (trainer/launch): command and args start one
// worker, env adds to its environment; the task config gives the run
// name, world size (and an elastic gang's least), storage path and its
// options, config and builtin.
func LocalWorkers(command string, args, env []string) RunFunc {
	return func(ctx context.Context, job *api.Job) error {
		cfg := job.TaskGroups[0].Tasks[0].Config
		str := func(k string) string { s, _ := cfg[k].(string); return s }
		e := env
		if b := str("builtin"); b != "" {
			e = append(append([]string(nil), env...), workerenv.Builtin+"="+b)
		}
		minWorkers, _ := cfg["min_world_size"].(int) // an elastic gang's least
		out, err := launch.Launch(ctx, launch.Options{Command: command, Args: args,
			Run: workerenv.Run{Env: e, NumWorkers: WorkerCount(job), MinWorkers: minWorkers, Name: str("run_name"),
				StoragePath: str("storage_path"), Storage: trainspec.StorageOptionsOf(job), Config: []byte(str("train_config"))},
			StopGrace: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		if out.Failed() {
			return fmt.Errorf("workers failed: %v", out.Failures())
		}
		return nil
	}
}
