package executor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times. It is 100 on
// every Linux architecture Nomad supports.
const clockTicks = 100

// procStat is the part of /proc/<pid>/stat the executor uses.
type procStat struct {
	PID, PPID, PGRP int
	State           byte
	UTime, STime    uint64 // clock ticks
	StartTime       uint64 // clock ticks since boot
	RSSPages        int64
}

// errProcFormat marks text that is not in the expected /proc format.
var errProcFormat = errors.New("unexpected /proc format")

// parseProcStat parses the one line of /proc/<pid>/stat. The command name
// (field 2) is in parentheses and may itself hold spaces and parentheses, so
// the fields are split after the last ')'.
func parseProcStat(s string) (procStat, error) {
	var p procStat
	open := strings.IndexByte(s, '(')
	end := strings.LastIndexByte(s, ')')
	if open < 1 || end < open {
		return p, fmt.Errorf("%w: no command name in stat", errProcFormat)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil {
		return p, fmt.Errorf("%w: pid: %v", errProcFormat, err)
	}
	p.PID = pid
	f := strings.Fields(s[end+1:])
	// f[0] is field 3 (state); field n is f[n-3]. We need up to 24 (rss).
	if len(f) < 22 {
		return p, fmt.Errorf("%w: stat has %d fields after the name", errProcFormat, len(f))
	}
	if c := f[0][0]; len(f[0]) != 1 || !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
		return p, fmt.Errorf("%w: state %q", errProcFormat, f[0]) // the kernel's states are letters
	}
	p.State = f[0][0]
	ints := []struct {
		field int
		dst   *int
	}{{4, &p.PPID}, {5, &p.PGRP}}
	for _, x := range ints {
		v, err := strconv.Atoi(f[x.field-3])
		if err != nil {
			return p, fmt.Errorf("%w: field %d: %v", errProcFormat, x.field, err)
		}
		*x.dst = v
	}
	uints := []struct {
		field int
		dst   *uint64
	}{{14, &p.UTime}, {15, &p.STime}, {22, &p.StartTime}}
	for _, x := range uints {
		v, err := strconv.ParseUint(f[x.field-3], 10, 64)
		if err != nil {
			return p, fmt.Errorf("%w: field %d: %v", errProcFormat, x.field, err)
		}
		*x.dst = v
	}
	rss, err := strconv.ParseInt(f[24-3], 10, 64)
	if err != nil {
		return p, fmt.Errorf("%w: field 24: %v", errProcFormat, err)
	}
	p.RSSPages = rss
	return p, nil
}

// parseProcStatusMem returns VmRSS and VmSwap (in bytes) from the text of
// /proc/<pid>/status. Kernel threads and zombies have neither: zero, false.
func parseProcStatusMem(s string) (rss, swap uint64, hasSwap bool, err error) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmSwap") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, false, fmt.Errorf("%w: status %s %q", errProcFormat, key, rest)
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, false, fmt.Errorf("%w: status %s: %v", errProcFormat, key, err)
		}
		if key == "VmRSS" {
			rss = v * 1024
		} else {
			swap, hasSwap = v*1024, true
		}
	}
	return rss, swap, hasSwap, sc.Err()
}

// parseFlatKeyed parses cgroup "flat keyed" files (cpu.stat, memory.stat,
// memory.events): one "key value" pair per line.
func parseFlatKeyed(s string) (map[string]uint64, error) {
	m := make(map[string]uint64)
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: line %d %q is not \"key value\"", errProcFormat, i+1, line)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", errProcFormat, i+1, err)
		}
		m[f[0]] = v
	}
	return m, nil
}

// parseSingleValue parses a one-value cgroup file such as memory.current or
// memory.max; "max" means no limit (ok=false).
func parseSingleValue(s string) (v uint64, ok bool, err error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, false, nil
	}
	v, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %q is not a number", errProcFormat, s)
	}
	return v, true, nil
}

// parseCPUInfoMHz returns the first "cpu MHz" value of /proc/cpuinfo, or 0
// when the architecture does not report one.
func parseCPUInfoMHz(s string) float64 {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "cpu MHz" {
			if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
				return v
			}
		}
	}
	return 0
}

// readProcStat reads and parses /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(b))
}

// listProcs parses /proc/<pid>/stat of every process; processes that vanish
// while being read are skipped.
func listProcs() ([]procStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	out := make([]procStat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// treeOf returns the live (non-zombie) processes that descend from root or
// belong to the process group root leads, root included: the task's tree.
// Pure: it works on a snapshot from listProcs.
func treeOf(root int, procs []procStat) []procStat {
	children := make(map[int][]int)
	byPID := make(map[int]procStat, len(procs))
	for _, p := range procs {
		byPID[p.PID] = p
		children[p.PPID] = append(children[p.PPID], p.PID)
	}
	seen := make(map[int]bool)
	var out []procStat
	add := func(p procStat) bool {
		if seen[p.PID] {
			return false
		}
		seen[p.PID] = true
		if p.State != 'Z' && p.State != 'X' {
			out = append(out, p)
		}
		return true
	}
	var queue []int
	if p, ok := byPID[root]; ok {
		add(p)
		queue = append(queue, root)
	}
	for _, p := range procs {
		if p.PGRP == root && add(p) {
			queue = append(queue, p.PID)
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if add(byPID[c]) {
				queue = append(queue, c)
			}
		}
	}
	return out
}
