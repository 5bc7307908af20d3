package nomad

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/internal/english"
)

// A failed plan's metric does not tell a full cluster from one too small:
// Nomad's bin-packer counts a node that lacks the cores for one allocation
// as "exhausted" whether other allocations hold those cores or the node
// never had them (only a missing driver, device or attribute filters a
// node out). What the nodes have when idle does: IdleShortfall compares
// each group's allocations with the ready nodes' whole resources (less what
// the operator reserved), so a gang that asks more than the cluster has
// is told apart from one that waits for others to finish.

// reservation is what one allocation of a task group reserves on a node.
type reservation struct {
	cpuMHz, cores, memoryMB int64
}

func (r reservation) String() string {
	cpu := fmt.Sprintf("%d MHz CPU", r.cpuMHz)
	if r.cores > 0 {
		cpu = fmt.Sprintf("%d cores", r.cores)
		if r.cpuMHz > 0 {
			cpu += fmt.Sprintf(" + %d MHz", r.cpuMHz)
		}
	}
	return fmt.Sprintf("%s, %d MB memory", cpu, r.memoryMB)
}

// groupReservation sums a group's tasks' resources.
func groupReservation(g *api.TaskGroup) reservation {
	var r reservation
	for _, t := range g.Tasks {
		if t.Resources == nil {
			continue
		}
		if t.Resources.Cores != nil && *t.Resources.Cores > 0 {
			r.cores += int64(*t.Resources.Cores)
		} else if t.Resources.CPU != nil {
			r.cpuMHz += int64(*t.Resources.CPU)
		}
		if t.Resources.MemoryMB != nil {
			r.memoryMB += int64(*t.Resources.MemoryMB)
		}
	}
	return r
}

// nodeRoom is what a ready node can give allocations when nothing runs on
// it.
type nodeRoom struct {
	name                    string
	cpuMHz, cores, memoryMB int64
}

// roomOf is a node's schedulable resources, and false for a node the
// scheduler would not use (down, draining, ineligible) or that does not
// say (an agent that lists no resources).
func roomOf(n *api.NodeListStub) (nodeRoom, bool) {
	if n.Status != api.NodeStatusReady || n.Drain || n.SchedulingEligibility == api.NodeSchedulingIneligible || n.NodeResources == nil {
		return nodeRoom{}, false
	}
	res := n.NodeResources
	r := nodeRoom{name: n.Name, cpuMHz: res.Cpu.CpuShares, cores: int64(res.Cpu.TotalCpuCores), memoryMB: res.Memory.MemoryMB}
	if k := len(res.Cpu.ReservableCpuCores); k > 0 {
		r.cores = int64(k)
	}
	if rv := n.ReservedResources; rv != nil {
		r.cpuMHz -= int64(rv.Cpu.CpuShares)
		r.memoryMB -= int64(rv.Memory.MemoryMB)
	}
	return r, true
}

// holds is how many allocations reserving r the idle node holds. A task
// with cores reserves whole cores and their share of the node's MHz.
func (n nodeRoom) holds(r reservation) int64 {
	mhz := r.cpuMHz
	if r.cores > 0 && n.cores > 0 {
		mhz += r.cores * n.cpuMHz / n.cores
	}
	fit := int64(1 << 40)
	for _, d := range [][2]int64{{r.cores, n.cores}, {mhz, n.cpuMHz}, {r.memoryMB, n.memoryMB}} {
		if d[0] > 0 {
			fit = min(fit, max(d[1], 0)/d[0])
		}
	}
	return fit
}

// distinctHosts reports whether the group (or its job) puts each
// allocation on a node of its own.
func distinctHosts(job *api.Job, g *api.TaskGroup) bool {
	for _, c := range slices.Concat(job.Constraints, g.Constraints) {
		if c != nil && c.Operand == api.ConstraintDistinctHosts && c.RTarget != "false" {
			return true
		}
	}
	return false
}

// IdleShortfall says, for each group of job that the cluster's ready nodes
// could not hold whole even with nothing else running, why; nil when every
// group fits an idle cluster, or when no ready node lists its resources
// (an empty pool may be one an autoscaler fills on demand). It looks at
// CPU, cores and memory only, and ignores constraints, so it never calls
// a gang unplaceable that an idle cluster could run.
func IdleShortfall(job *api.Job, nodes []*api.NodeListStub) []string {
	var rooms []nodeRoom
	for _, n := range nodes {
		if r, ok := roomOf(n); ok {
			rooms = append(rooms, r)
		}
	}
	if len(rooms) == 0 {
		return nil
	}
	var out []string
	for _, g := range job.TaskGroups {
		if g.Name == nil || g.Count == nil || *g.Count == 0 {
			continue
		}
		r := groupReservation(g)
		var total int64
		largest := rooms[0]
		for _, n := range rooms {
			k := n.holds(r)
			if distinctHosts(job, g) {
				k = min(k, 1)
			}
			total += k
			if n.cores > largest.cores || n.cores == largest.cores && n.cpuMHz > largest.cpuMHz {
				largest = n
			}
		}
		if total >= int64(*g.Count) {
			continue
		}
		out = append(out, fmt.Sprintf("group %q has %d allocations of %s each, but the %d ready %s could hold only %d with nothing else running (largest: %s, %d cores, %d MHz, %d MB): ask for less in resources_per_worker or add bigger nodes",
			*g.Name, *g.Count, r, len(rooms), english.Plural(len(rooms), "node", "nodes"), total, largest.name, largest.cores, largest.cpuMHz, largest.memoryMB))
	}
	return out
}

// checkIdle turns a capacity error into an unplaceable one when the
// cluster could not run the gang even idle. A node list that cannot be
// read leaves the error as it is (waiting is the safe side).
func checkIdle(ctx context.Context, c API, job *api.Job, err error) error {
	var ce *CapacityError
	if !errors.As(err, &ce) || ce.Unplaceable {
		return err
	}
	nodes, lerr := c.Nodes(ctx)
	if lerr != nil {
		return err
	}
	if why := IdleShortfall(job, nodes); len(why) > 0 {
		ce.Unplaceable = true
		ce.Hints = append(ce.Hints, why...)
	}
	return err
}
