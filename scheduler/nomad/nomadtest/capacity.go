package nomadtest

import (
	"net/http"
	"slices"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The fake's capacity model. Without nodes (the default) every plan fits
// and every job is placed at once. With SetNodes, the fake packs
// allocations onto the nodes first-fit, as a small cluster would: the live
// allocations of every other job (the scripted ones pending or running; a
// registered, unscripted job's whole groups) hold their tasks' cores, MHz
// and memory; a plan whose allocations do not all fit in what is left
// fails with an exhausted-resources metric, the way Nomad reports both a
// full node and one too small; a Node places a registered job that does
// not fit only once the capacity is freed (its job ended or was stopped),
// showing a blocked evaluation meanwhile.

// MHzPerCore is the speed ClientNode gives each core.
const MHzPerCore = 1000

// ClientNode is a ready, eligible client node with cores CPU cores of
// MHzPerCore each and memoryMB of memory.
func ClientNode(name string, cores, memoryMB int) *api.NodeListStub {
	return &api.NodeListStub{ID: "node-" + name, Name: name, Datacenter: "dc1", NodePool: "default",
		Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible,
		NodeResources: &api.NodeResources{
			Cpu:    api.NodeCpuResources{CpuShares: int64(cores * MHzPerCore), TotalCpuCores: uint16(cores)},
			Memory: api.NodeMemoryResources{MemoryMB: int64(memoryMB)},
		}}
}

// SetNodes makes the fake cluster these client nodes: /v1/nodes lists them
// and plans and placements respect their resources.
func (s *Server) SetNodes(nodes ...*api.NodeListStub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = nodes
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := []*api.NodeListStub{}
	withResources := r.URL.Query().Get("resources") == "true"
	for _, n := range s.nodes {
		c := *n
		if !withResources {
			c.NodeResources, c.ReservedResources = nil, nil
		}
		out = append(out, &c)
	}
	s.mu.Unlock()
	reply(w, 1, out)
}

// room is a node's free resources.
type room struct{ mhz, cores, mem int64 }

// need is what one allocation of a group takes.
func need(g *api.TaskGroup) room {
	var n room
	for _, t := range g.Tasks {
		if t.Resources == nil {
			continue
		}
		if t.Resources.Cores != nil && *t.Resources.Cores > 0 {
			n.cores += int64(*t.Resources.Cores)
			n.mhz += int64(*t.Resources.Cores) * MHzPerCore
		} else if t.Resources.CPU != nil {
			n.mhz += int64(*t.Resources.CPU)
		}
		if t.Resources.MemoryMB != nil {
			n.mem += int64(*t.Resources.MemoryMB)
		}
	}
	return n
}

// take places one allocation first-fit; it returns the dimension that
// stopped it ("" when placed).
func take(free []room, n room) string {
	dim := ""
	for i := range free {
		switch {
		case free[i].cores < n.cores:
			dim = "cores"
		case free[i].mhz < n.mhz:
			dim = "cpu"
		case free[i].mem < n.mem:
			dim = "memory"
		default:
			free[i].cores -= n.cores
			free[i].mhz -= n.mhz
			free[i].mem -= n.mem
			return ""
		}
	}
	return dim
}

// freeLocked is what the nodes have left once every live allocation of
// every job but except is placed. s.mu is held.
func (s *Server) freeLocked(except string) []room {
	free := make([]room, 0, len(s.nodes))
	for _, n := range s.nodes {
		r := n.NodeResources
		free = append(free, room{mhz: r.Cpu.CpuShares, cores: int64(r.Cpu.TotalCpuCores), mem: r.Memory.MemoryMB})
	}
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if id == except {
			continue
		}
		job := s.jobs[id]
		groups := map[string]*api.TaskGroup{}
		for _, g := range job.TaskGroups {
			groups[*g.Name] = g
		}
		if sc := s.scripts[id]; sc != nil {
			for _, a := range sc.steps[sc.cur].Allocations {
				if g := groups[a.TaskGroup]; g != nil && (a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning) {
					take(free, need(g))
				}
			}
			continue
		}
		if _, stopped := s.stopped[id]; stopped {
			continue
		}
		for _, g := range job.TaskGroups {
			for range *g.Count {
				take(free, need(g))
			}
		}
	}
	return free
}

// shortLocked is, per group of job that does not fit now, the metric a
// plan reports; nil when it fits or the fake has no nodes. s.mu is held.
func (s *Server) shortLocked(job *api.Job) map[string]*api.AllocationMetric {
	if len(s.nodes) == 0 {
		return nil
	}
	free := s.freeLocked(*job.ID)
	var failed map[string]*api.AllocationMetric
	for _, g := range job.TaskGroups {
		unplaced, dim := 0, ""
		for range *g.Count {
			if d := take(free, need(g)); d != "" {
				unplaced, dim = unplaced+1, d
			}
		}
		if unplaced == 0 {
			continue
		}
		if failed == nil {
			failed = map[string]*api.AllocationMetric{}
		}
		n := len(s.nodes)
		failed[*g.Name] = &api.AllocationMetric{NodesEvaluated: n, NodesAvailable: map[string]int{"dc1": n},
			NodesExhausted: n, DimensionExhausted: map[string]int{dim: n}, CoalescedFailures: unplaced - 1}
	}
	return failed
}

// place scripts the job's allocations as running when the whole job fits
// next to every other job's, and reports whether it did; otherwise it
// scripts a blocked evaluation (created at index gen) that says why.
func (s *Server) place(job *api.Job, running Step, gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := *job.ID
	failed := s.shortLocked(job)
	if failed == nil {
		s.scripts[id] = &script{steps: []Step{running}}
		return true
	}
	blocked := "eval-blocked-" + id
	s.scripts[id] = &script{steps: []Step{{Allocations: []*api.AllocationListStub{}, Evaluations: []*api.Evaluation{
		{ID: "eval-" + id, JobID: id, Status: "complete", BlockedEval: blocked, FailedTGAllocs: failed, CreateIndex: gen, ModifyIndex: gen},
		{ID: blocked, JobID: id, Status: "blocked", CreateIndex: gen, ModifyIndex: gen},
	}}}}
	return false
}

// placeWhenFree places the job as soon as it fits; false when done ends
// first.
func (s *Server) placeWhenFree(done <-chan struct{}, job *api.Job, running Step, gen uint64) bool {
	for !s.place(job, running, gen) {
		select {
		case <-done:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}
