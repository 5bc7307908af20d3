package multinode

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Proc is one process as /proc shows it.
type Proc struct {
	PID, PPID int
	// Environ is the process's environment at its start, KEY=VALUE.
	Environ []string
}

// Machine returns, sorted, the pids of the processes that make up one
// simulated machine: every process whose environment holds marker
// (KEY=VALUE, exactly), and every descendant of one, whatever its own
// environment (a worker gets only its task's). Pure: ReadProcs feeds it.
func Machine(procs []Proc, marker string) []int {
	children := map[int][]int{}
	var todo []int
	for _, p := range procs {
		children[p.PPID] = append(children[p.PPID], p.PID)
		if slices.Contains(p.Environ, marker) {
			todo = append(todo, p.PID)
		}
	}
	seen := map[int]bool{}
	for len(todo) > 0 {
		pid := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		todo = append(todo, children[pid]...)
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// ReadProcs lists the processes under root (/proc). A process that exits
// while it is read is left out; one whose environment cannot be read (not
// ours) is listed without it.
func ReadProcs(root string) ([]Proc, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", root, err)
	}
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue
		}
		ppid, ok := parentOf(string(stat))
		if !ok {
			continue
		}
		p := Proc{PID: pid, PPID: ppid}
		if env, err := os.ReadFile(filepath.Join(root, e.Name(), "environ")); err == nil {
			for _, kv := range bytes.Split(env, []byte{0}) {
				if len(kv) > 0 {
					p.Environ = append(p.Environ, string(kv))
				}
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// parentOf reads the parent pid from a /proc/<pid>/stat line: the fourth
// field, counted after the command name in parentheses (which may itself
// hold spaces and parentheses).
func parentOf(stat string) (int, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
