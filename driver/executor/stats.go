package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Names for Usage.Measured, as Nomad's UI labels them.
const (
	MeasuredRSS        = "RSS"
	MeasuredSwap       = "Swap"
	MeasuredMaxUsage   = "Max Usage"
	MeasuredUserMode   = "User Mode"
	MeasuredSystemMode = "System Mode"
	MeasuredPercent    = "Percent"
	MeasuredTotalTicks = "Total Ticks"
)

// Usage is one resource sample of the task's whole process tree (or cgroup).
type Usage struct {
	// CPUPercent is CPU use over the interval since the previous sample (the
	// first sample: since the start), in percent of one core. UserMode and
	// SystemMode split it.
	CPUPercent, UserMode, SystemMode float64
	// TotalTicks is CPUPercent expressed in MHz of one core, the unit of
	// Nomad's CPU reservation.
	TotalTicks float64
	// RSS, Swap and MaxUsage are bytes. MaxUsage is the cgroup's peak.
	RSS, Swap, MaxUsage uint64
	// Measured lists which fields were measured (the Measured* names).
	Measured []string
	// Time is when the sample was taken.
	Time time.Time
}

// cpuSample is cumulative CPU time in seconds.
type cpuSample struct{ user, sys, total float64 }

// memSample is the memory part of a Usage.
type memSample struct {
	rss, swap, peak uint64
	measured        []string
}

// Stats samples the task's CPU and memory. With a cgroup it reads the
// cgroup's cpu.stat and memory files; otherwise it walks /proc from the
// worker over its descendants and process group.
func (t *Task) Stats(ctx context.Context) (Usage, error) {
	if err := ctx.Err(); err != nil {
		return Usage{}, err
	}
	if t.isDone() {
		return Usage{}, fmt.Errorf("stats of task %q: %w", t.st.TaskID, ErrTaskExited)
	}
	var (
		cpu cpuSample
		mem memSample
		err error
	)
	if t.st.Cgroup != "" {
		cpu, mem, err = cgroupSample(t.st.Cgroup)
		if err == nil && len(mem.measured) == 0 {
			// No memory controller in this cgroup: count the tree's memory.
			_, mem, err = treeSample(t.st.PID)
		}
	} else {
		cpu, mem, err = treeSample(t.st.PID)
	}
	if err != nil {
		return Usage{}, fmt.Errorf("stats of task %q: %w", t.st.TaskID, err)
	}
	now := t.opts.now()

	t.statsMu.Lock()
	prevAt, prev := t.prevAt, cpuSample{t.prevUser, t.prevSys, t.prevTotal}
	if prevAt.IsZero() {
		prevAt = t.st.StartedAt
	}
	t.prevAt, t.prevUser, t.prevSys, t.prevTotal = now, cpu.user, cpu.sys, cpu.total
	t.statsMu.Unlock()

	u := cpuUsage(prev, cpu, now.Sub(prevAt), t.mhz)
	u.RSS, u.Swap, u.MaxUsage, u.Time = mem.rss, mem.swap, mem.peak, now
	u.Measured = append(u.Measured, mem.measured...)
	return u, nil
}

// cpuUsage turns two cumulative samples an interval apart into percentages.
// Pure. A non-positive interval or a counter that went backwards (a child
// reaped out of the tree) gives zeros rather than nonsense.
func cpuUsage(prev, cur cpuSample, interval time.Duration, mhz float64) Usage {
	u := Usage{Measured: []string{MeasuredPercent, MeasuredUserMode, MeasuredSystemMode}}
	secs := interval.Seconds()
	pct := func(a, b float64) float64 {
		if secs <= 0 || b < a {
			return 0
		}
		return (b - a) / secs * 100
	}
	u.CPUPercent = pct(prev.total, cur.total)
	u.UserMode = pct(prev.user, cur.user)
	u.SystemMode = pct(prev.sys, cur.sys)
	if mhz > 0 {
		u.TotalTicks = u.CPUPercent / 100 * mhz
		u.Measured = append(u.Measured, MeasuredTotalTicks)
	}
	return u
}

// treeSample sums CPU and memory over the worker's process tree.
func treeSample(pid int) (cpuSample, memSample, error) {
	procs, err := listProcs()
	if err != nil {
		return cpuSample{}, memSample{}, err
	}
	tree := treeOf(pid, procs)
	if len(tree) == 0 {
		return cpuSample{}, memSample{}, fmt.Errorf("process %d: %w", pid, ErrTaskExited)
	}
	var cpu cpuSample
	mem := memSample{measured: []string{MeasuredRSS}}
	hasSwap := false
	for _, p := range tree {
		cpu.user += float64(p.UTime) / clockTicks
		cpu.sys += float64(p.STime) / clockTicks
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "status"))
		if err != nil {
			continue // exited meanwhile
		}
		rss, swap, ok, err := parseProcStatusMem(string(b))
		if err != nil {
			return cpuSample{}, memSample{}, fmt.Errorf("process %d: %w", p.PID, err)
		}
		mem.rss += rss
		mem.swap += swap
		hasSwap = hasSwap || ok
	}
	cpu.total = cpu.user + cpu.sys
	if hasSwap {
		mem.measured = append(mem.measured, MeasuredSwap)
	}
	return cpu, mem, nil
}

// cgroupSample reads a cgroup v2 directory. cpu.stat is always present;
// memory files only with the memory controller.
func cgroupSample(dir string) (cpuSample, memSample, error) {
	var cpu cpuSample
	var mem memSample
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return cpu, mem, fmt.Errorf("read cpu.stat: %w", err)
	}
	cs, err := parseFlatKeyed(string(b))
	if err != nil {
		return cpu, mem, fmt.Errorf("parse cpu.stat: %w", err)
	}
	cpu = cpuSample{
		user:  float64(cs["user_usec"]) / 1e6,
		sys:   float64(cs["system_usec"]) / 1e6,
		total: float64(cs["usage_usec"]) / 1e6,
	}
	if b, err := os.ReadFile(filepath.Join(dir, "memory.stat")); err == nil {
		ms, err := parseFlatKeyed(string(b))
		if err != nil {
			return cpu, mem, fmt.Errorf("parse memory.stat: %w", err)
		}
		mem.rss = ms["anon"]
		mem.measured = append(mem.measured, MeasuredRSS)
	}
	single := func(file string) (uint64, bool) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0, false
		}
		v, ok, err := parseSingleValue(string(b))
		return v, ok && err == nil
	}
	if v, ok := single("memory.swap.current"); ok {
		mem.swap = v
		mem.measured = append(mem.measured, MeasuredSwap)
	}
	if v, ok := single("memory.peak"); ok {
		mem.peak = v
		mem.measured = append(mem.measured, MeasuredMaxUsage)
	}
	return cpu, mem, nil
}

// hostCPUMHz reads one core's clock from /proc/cpuinfo (0 if unknown).
func hostCPUMHz() float64 {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return parseCPUInfoMHz(string(b))
}
