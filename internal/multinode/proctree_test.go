package multinode

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestMachine(t *testing.T) {
	const marker = "MULTINODE_PROOF_MACHINE=client-1"
	procs := []Proc{
		{PID: 1, PPID: 0},
		{PID: 10, PPID: 1, Environ: []string{"A=b", marker}},       // the agent
		{PID: 11, PPID: 10, Environ: []string{marker}},             // the plugin
		{PID: 12, PPID: 1, Environ: []string{marker}},              // a shim in its own session
		{PID: 13, PPID: 12, Environ: []string{"NOMAD_ALLOC_ID=x"}}, // its worker
		{PID: 14, PPID: 13}, // the worker's child
		{PID: 20, PPID: 1, Environ: []string{"MULTINODE_PROOF_MACHINE=client-10"}}, // another machine
		{PID: 21, PPID: 20},
		{PID: 30, PPID: 1, Environ: []string{"X=" + marker}}, // the marker as a value is not the marker
	}
	cases := []struct {
		name   string
		marker string
		want   []int
	}{
		{"agent, plugin, shim and the workers below them", marker, []int{10, 11, 12, 13, 14}},
		{"another machine", "MULTINODE_PROOF_MACHINE=client-10", []int{20, 21}},
		{"no such machine", "MULTINODE_PROOF_MACHINE=client-3", []int{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, Machine(procs, tc.marker))
		})
	}
}

func TestParentOf(t *testing.T) {
	cases := []struct {
		stat string
		ppid int
		ok   bool
	}{
		{"123 (sleep) S 45 123 45 0 -1", 45, true},
		{"123 (a b) c)) R 7 1 1", 7, true},
		{"123 (cut", 0, false},
		{"123 (x) S", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.stat, func(t *testing.T) {
			ppid, ok := parentOf(tc.stat)
			must.Eq(t, tc.ok, ok)
			must.Eq(t, tc.ppid, ppid)
		})
	}
}

// TestReadProcsFindsAChildByMarker starts a process with the marker and a
// child of it without, and finds both, with their parentage, in /proc.
func TestReadProcsFindsAChildByMarker(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	marker := "MULTINODE_PROOF_MACHINE=readprocs-" + strconv.Itoa(os.Getpid())
	cmd := exec.Command("/bin/sh", "-c", "env -i /bin/sleep 60 & wait")
	cmd.Env = []string{marker}
	must.NoError(t, cmd.Start())
	t.Cleanup(func() {
		procs, _ := ReadProcs("/proc")
		for _, pid := range Machine(procs, marker) {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
		_ = cmd.Wait()
	})
	var got []int
	for range 200 { // the shell forks its child in its own time
		procs, err := ReadProcs("/proc")
		must.NoError(t, err)
		if got = Machine(procs, marker); len(got) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	must.SliceLen(t, 2, got, must.Sprintf("pids %v", got))
	must.SliceContains(t, got, cmd.Process.Pid)
}
