package trainspec

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// nomadRules checks job the way a Nomad server would on `nomad job
// validate` or a register: first the defaults the agent fills in
// (api.Job.Canonicalize, which is where an unset reschedule attempts
// becomes 1, and the server's "*" for no datacenters), then the rules of nomad/structs' Job, TaskGroup, Task,
// RestartPolicy, ReschedulePolicy, Resources, Service and ServiceCheck
// validation, restated here for the fields the compiler emits. It returns
// every broken rule. job itself is not changed.
func nomadRules(job *api.Job) []error {
	b, err := json.Marshal(job)
	if err != nil {
		return []error{err}
	}
	var j api.Job
	if err := json.Unmarshal(b, &j); err != nil {
		return []error{err}
	}
	j.Canonicalize()
	if len(j.Datacenters) == 0 { // the server's own canonicalizer
		j.Datacenters = []string{"*"}
	}
	var r ruleErrs
	r.job(&j)
	return r
}

type ruleErrs []error

func (r *ruleErrs) addf(format string, args ...any) {
	*r = append(*r, fmt.Errorf(format, args...))
}

func (r *ruleErrs) job(j *api.Job) {
	if *j.Region == "" {
		r.addf("missing job region")
	}
	if id := *j.ID; id == "" || strings.ContainsAny(id, " \x00") {
		r.addf("job ID %q is empty or has a space or NUL", id)
	}
	if *j.Name == "" {
		r.addf("missing job name")
	}
	if *j.Namespace == "" {
		r.addf("job must be in a namespace")
	}
	switch *j.Type {
	case "service", "batch", "system", "sysbatch":
	default:
		r.addf("invalid job type %q", *j.Type)
	}
	for _, dc := range j.Datacenters {
		if dc == "" {
			r.addf("job datacenter must be a non-empty string")
		}
	}
	if p := *j.Priority; p < 1 || p > 100 {
		r.addf("job priority %d is outside [1, 100]", p)
	}
	if len(j.TaskGroups) == 0 {
		r.addf("missing job task groups")
	}
	names := map[string]bool{}
	for _, g := range j.TaskGroups {
		if names[*g.Name] {
			r.addf("task group %q defined twice", *g.Name)
		}
		names[*g.Name] = true
		r.group(*j.Type, g)
	}
}

func (r *ruleErrs) group(jobType string, g *api.TaskGroup) {
	if *g.Name == "" || strings.Contains(*g.Name, "\x00") {
		r.addf("task group name %q is empty or has a NUL", *g.Name)
	}
	if *g.Count < 0 {
		r.addf("group %s: count %d is negative", *g.Name, *g.Count)
	}
	if g.ShutdownDelay != nil && *g.ShutdownDelay < 0 {
		r.addf("group %s: shutdown_delay is negative", *g.Name)
	}
	if len(g.Tasks) == 0 {
		r.addf("group %s: missing tasks", *g.Name)
	}
	if g.Update != nil && jobType != "service" && jobType != "system" {
		r.addf("group %s: job type %q does not allow an update block", *g.Name, jobType)
	}
	if g.Migrate != nil && jobType != "service" {
		r.addf("group %s: job type %q does not allow a migrate block", *g.Name, jobType)
	}
	if g.EphemeralDisk == nil || *g.EphemeralDisk.SizeMB < 10 {
		r.addf("group %s: ephemeral disk must be at least 10 MB", *g.Name)
	}
	for _, s := range g.Spreads {
		r.spread(s)
	}
	if g.RestartPolicy == nil {
		r.addf("group %s: missing restart policy", *g.Name)
	} else {
		r.restart(g.RestartPolicy)
	}
	if jobType == "batch" || jobType == "service" {
		if g.ReschedulePolicy == nil {
			r.addf("group %s: missing reschedule policy", *g.Name)
		} else {
			r.reschedule(g.ReschedulePolicy)
		}
	}
	r.ports(g)
	for _, s := range g.Services {
		r.service(s)
	}
	for name, v := range g.Volumes {
		r.volume(*g.Name, name, *g.Count, v)
	}
	tasks := map[string]bool{}
	for _, t := range g.Tasks {
		if tasks[t.Name] {
			r.addf("group %s: task %q defined twice", *g.Name, t.Name)
		}
		tasks[t.Name] = true
		r.task(g, t)
	}
}

func (r *ruleErrs) spread(s *api.Spread) {
	if s.Attribute == "" {
		r.addf("missing spread attribute")
	}
	if w := *s.Weight; w <= 0 || w > 100 {
		r.addf("spread weight %d is outside (0, 100]", w)
	}
}

// Nomad's floors for policy timings.
const (
	nomadRestartMinInterval    = 5 * time.Second
	nomadRescheduleMinInterval = 15 * time.Second
	nomadRescheduleMinDelay    = 5 * time.Second
)

func (r *ruleErrs) restart(p *api.RestartPolicy) {
	mode, attempts, interval, delay := *p.Mode, *p.Attempts, *p.Interval, *p.Delay
	if mode != "delay" && mode != "fail" {
		r.addf("restart: unsupported mode %q", mode)
	}
	if attempts == 0 && mode != "fail" {
		r.addf("restart: mode %q with 0 attempts is ambiguous", mode)
	}
	if interval < nomadRestartMinInterval {
		r.addf("restart: interval %v is below %v", interval, nomadRestartMinInterval)
	}
	if time.Duration(attempts)*delay > interval {
		r.addf("restart: %d attempts with delay %v do not fit in interval %v", attempts, delay, interval)
	}
}

func (r *ruleErrs) reschedule(p *api.ReschedulePolicy) {
	attempts, interval, delay, maxDelay, fn, unlimited := *p.Attempts, *p.Interval, *p.Delay, *p.MaxDelay, *p.DelayFunction, *p.Unlimited
	if attempts <= 0 && !unlimited {
		return // rescheduling is off; Nomad checks nothing else
	}
	if attempts > 0 && interval <= 0 {
		r.addf("reschedule: interval must be set when attempts > 0")
	}
	if attempts > 0 && unlimited {
		r.addf("reschedule: attempts = %d and unlimited = true is ambiguous", attempts)
	}
	delaysOK := true
	if delay < nomadRescheduleMinDelay {
		r.addf("reschedule: delay %v is below %v", delay, nomadRescheduleMinDelay)
		delaysOK = false
	}
	if fn != "constant" && fn != "exponential" && fn != "fibonacci" {
		r.addf("reschedule: invalid delay function %q", fn)
		delaysOK = false
	}
	if fn != "constant" && (maxDelay < nomadRescheduleMinDelay || maxDelay < delay) {
		r.addf("reschedule: max_delay %v is below %v or below delay %v", maxDelay, nomadRescheduleMinDelay, delay)
		delaysOK = false
	}
	if unlimited {
		return
	}
	if interval < nomadRescheduleMinInterval {
		r.addf("reschedule: interval %v is below %v", interval, nomadRescheduleMinInterval)
	}
	if delaysOK && !rescheduleFits(attempts, interval, delay, maxDelay, fn) {
		r.addf("reschedule: %d attempts do not fit in %v with delay %v (%s, ceiling %v)", attempts, interval, delay, fn, maxDelay)
	}
}

// rescheduleFits says whether attempts reschedules with the delay function
// fit in interval, as Nomad computes it: constant delays add up; an
// exponential one is checked at each attempt against the interval (the
// delays add up once they reach the ceiling); fibonacci by its last delay.
func rescheduleFits(attempts int, interval, delay, maxDelay time.Duration, fn string) bool {
	switch fn {
	case "constant":
		return time.Duration(attempts)*delay <= interval
	case "exponential":
		var total time.Duration
		fits := 0
		for i := range attempts {
			next := time.Duration(math.Pow(2, float64(i))) * delay
			if next > maxDelay {
				total += maxDelay
			} else {
				total = next
			}
			if total < interval {
				fits++
			}
		}
		return fits >= attempts
	default:
		prev, cur, ceiling := delay, delay, false
		for i := 2; i < attempts; i++ {
			next := prev + cur
			if ceiling {
				next = cur + maxDelay
			} else if next > maxDelay {
				next, ceiling = maxDelay, true
			}
			prev, cur = cur, next
		}
		return cur <= interval
	}
}

// ports: labels unique across the group's networks and the tasks'.
func (r *ruleErrs) ports(g *api.TaskGroup) {
	seen := map[string]bool{}
	check := func(ports []api.Port) {
		for _, p := range ports {
			if seen[p.Label] {
				r.addf("group %s: port label %q already in use", *g.Name, p.Label)
			}
			seen[p.Label] = true
			if p.Value > math.MaxUint16 || p.To < -1 || p.To > math.MaxUint16 {
				r.addf("group %s: port %q out of range", *g.Name, p.Label)
			}
		}
	}
	for _, n := range g.Networks {
		check(append(append([]api.Port{}, n.ReservedPorts...), n.DynamicPorts...))
	}
	for _, t := range g.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, n := range t.Resources.Networks {
			check(append(append([]api.Port{}, n.ReservedPorts...), n.DynamicPorts...))
		}
	}
}

// serviceName is RFC 1123 as Nomad reads it: alphanumerics and dashes, at
// most 63, not starting or ending with a dash.
var serviceName = regexp.MustCompile(`^(?i:[a-z0-9]|[a-z0-9][a-z0-9\-]{0,61}[a-z0-9])$`)

func (r *ruleErrs) service(s *api.Service) {
	if !serviceName.MatchString(s.Name) {
		r.addf("service name %q is not a valid RFC 1123 name of at most 63 characters", s.Name)
	}
	var types []string
	switch s.Provider {
	case "consul":
		types = []string{"http", "tcp", "script", "grpc"}
	case "nomad":
		types = []string{"http", "tcp"}
	default:
		r.addf("service %s: provider %q is neither consul nor nomad", s.Name, s.Provider)
	}
	for _, c := range s.Checks {
		if s.PortLabel == "" && c.PortLabel == "" && (c.Type == "tcp" || c.Type == "http" || c.Type == "grpc") {
			r.addf("service %s: check %q needs a port", s.Name, c.Name)
		}
		if types != nil && !slices.Contains(types, strings.ToLower(c.Type)) {
			r.addf("service %s: check type %q is not one of %v", s.Name, c.Type, types)
		}
		if c.Type == "http" && (c.Path == "" || strings.Contains(c.Path, "://")) {
			r.addf("service %s: http check needs a relative path", s.Name)
		}
		if c.Interval < time.Second || c.Timeout < time.Second {
			r.addf("service %s: check %q interval %v and timeout %v must be at least 1s", s.Name, c.Name, c.Interval, c.Timeout)
		}
	}
}

func (r *ruleErrs) task(g *api.TaskGroup, t *api.Task) {
	if t.Name == "" || t.Name == "alloc" || strings.ContainsAny(t.Name, "/\\\x00") {
		r.addf("task name %q is empty, \"alloc\" or has a slash or NUL", t.Name)
	}
	if t.Driver == "" {
		r.addf("task %s: missing driver", t.Name)
	}
	if *t.KillTimeout < 0 {
		r.addf("task %s: kill_timeout is negative", t.Name)
	}
	if t.ShutdownDelay < 0 {
		r.addf("task %s: shutdown_delay is negative", t.Name)
	}
	for _, c := range t.Constraints {
		if c.Operand == "distinct_hosts" || c.Operand == "distinct_property" {
			r.addf("task %s: operand %q is allowed only on a group", t.Name, c.Operand)
		}
	}
	if t.Resources == nil {
		r.addf("task %s: missing resources", t.Name)
	} else {
		r.resources(t.Name, t.Resources)
	}
	if lc := t.LogConfig; lc == nil {
		r.addf("task %s: missing log config", t.Name)
	} else if *lc.MaxFiles < 1 || *lc.MaxFileSizeMB < 1 || *g.EphemeralDisk.SizeMB <= *lc.MaxFiles**lc.MaxFileSizeMB {
		r.addf("task %s: logs (%d files of %d MB) do not fit the %d MB disk", t.Name, *lc.MaxFiles, *lc.MaxFileSizeMB, *g.EphemeralDisk.SizeMB)
	}
	for i, m := range t.VolumeMounts {
		if m.Volume == nil || g.Volumes[*m.Volume] == nil {
			r.addf("task %s: volume mount %d references an undefined volume", t.Name, i)
		}
		if m.Destination == nil || *m.Destination == "" {
			r.addf("task %s: volume mount %d has no destination", t.Name, i)
		}
	}
	dests := map[string]bool{}
	for _, tm := range t.Templates {
		if dests[*tm.DestPath] {
			r.addf("task %s: two templates write %s", t.Name, *tm.DestPath)
		}
		dests[*tm.DestPath] = true
	}
	for _, s := range t.Services {
		r.service(s)
	}
}

func (r *ruleErrs) resources(task string, res *api.Resources) {
	cpu, cores, mem := *res.CPU, *res.Cores, *res.MemoryMB
	if cpu > 0 && cores > 0 {
		r.addf("task %s: asks for both cpu and cores", task)
	}
	if cores < 0 {
		r.addf("task %s: cores %d is negative", task, cores)
	}
	if cpu < 1 && cores == 0 {
		r.addf("task %s: cpu %d is below 1", task, cpu)
	}
	if mem < 10 {
		r.addf("task %s: memory %d MB is below 10", task, mem)
	}
	if mm := res.MemoryMaxMB; mm != nil && *mm != 0 && *mm != -1 && *mm < mem {
		r.addf("task %s: memory_max %d is below memory %d", task, *mm, mem)
	}
	if res.DiskMB != nil && *res.DiskMB > 0 {
		r.addf("task %s: disk belongs to the group, not the task", task)
	}
	for _, d := range res.Devices {
		if d.Name == "" {
			r.addf("task %s: device without a name", task)
		}
		for _, c := range d.Constraints {
			if c.Operand == "distinct_hosts" || c.Operand == "distinct_property" {
				r.addf("task %s: device constraint operand %q", task, c.Operand)
			}
		}
	}
}

// volume checks a group's volume request as Nomad's VolumeRequest
// validation does: a known type and a source; for CSI, both modes,
// read-only modes mounted read-only, and single-claim modes in a group of
// one (or per_alloc); for host volumes, no per_alloc.
func (r *ruleErrs) volume(group, key string, count int, v *api.VolumeRequest) {
	if v.Name != key {
		r.addf("group %s: volume %q is keyed %q", group, v.Name, key)
	}
	if v.Source == "" {
		r.addf("group %s: volume %s has an empty source", group, key)
	}
	shared := count > 1 && !v.PerAlloc
	switch v.Type {
	case "host":
		if v.PerAlloc {
			r.addf("group %s: host volume %s does not support per_alloc", group, key)
		}
	case "csi":
		switch v.AttachmentMode {
		case "file-system", "block-device":
		default:
			r.addf("group %s: CSI volume %s needs an attachment mode, got %q", group, key, v.AttachmentMode)
		}
		switch v.AccessMode {
		case "single-node-reader-only", "multi-node-reader-only":
			if !v.ReadOnly {
				r.addf("group %s: %s volumes must be read-only", group, v.AccessMode)
			}
			if shared && v.AccessMode == "single-node-reader-only" {
				r.addf("group %s: volume with %s access mode allows only one reader", group, v.AccessMode)
			}
		case "single-node-writer":
			if shared {
				r.addf("group %s: volume with %s access mode allows only one reader or writer", group, v.AccessMode)
			}
		case "multi-node-single-writer":
			if shared && !v.ReadOnly {
				r.addf("group %s: volume with %s access mode allows only one writer", group, v.AccessMode)
			}
		case "multi-node-multi-writer":
		default:
			r.addf("group %s: CSI volume %s needs an access mode, got %q", group, key, v.AccessMode)
		}
	default:
		r.addf("group %s: volume %s has unrecognized type %q", group, key, v.Type)
	}
}
