package executor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// ownCgroupV2 returns this process's cgroup v2 directory, or "" with the
// reason none is usable.
func ownCgroupV2() (string, string) {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err.Error()
	}
	defer mi.Close()
	mount := ""
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		for i, x := range f {
			if x == "-" && i+1 < len(f) && f[i+1] == "cgroup2" {
				mount = f[4]
			}
		}
	}
	if mount == "" {
		return "", "no cgroup2 file system mounted"
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			dir := filepath.Join(mount, rest)
			if why := cgroupUsable(dir); why != "" {
				return "", why
			}
			return dir, ""
		}
	}
	return "", "this process has no cgroup v2 path"
}

func cgroupForTest(t *testing.T) string {
	parent, why := ownCgroupV2()
	if parent == "" {
		t.Skipf("cgroup v2 not writable here: %s", why)
	}
	return filepath.Join(parent, fmt.Sprintf("executor-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
}

func TestCgroupPlacementStatsAndCleanup(t *testing.T) {
	t.Parallel()
	path := cgroupForTest(t)
	f := newFixture(t)
	cfg := f.config("busy")
	cfg.CgroupPath = path
	cfg.CPUShares = 500
	cfg.MemoryMB = 512
	task := startTask(t, cfg)
	expectLine(t, f.outLines, "allocated")
	must.Eq(t, path, task.State().Cgroup)

	b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	must.NoError(t, err)
	members := strings.Fields(string(b))
	must.SliceContains(t, members, strconv.Itoa(task.State().PID))
	must.Len(t, 2, members) // the worker and its child; not the shim
	if _, err := os.Stat(filepath.Join(path, "memory.max")); err == nil {
		got, err := os.ReadFile(filepath.Join(path, "memory.max"))
		must.NoError(t, err)
		must.Eq(t, strconv.Itoa(512<<20), strings.TrimSpace(string(got)))
	} else {
		t.Log("memory controller not delegated here; memory.max not checked")
	}

	time.Sleep(200 * time.Millisecond)
	u, err := task.Stats(context.Background())
	must.NoError(t, err)
	must.Greater(t, 0, u.CPUPercent)
	must.GreaterEq(t, 64<<20, u.RSS) // from memory.stat, or the tree without a memory controller

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must.NoError(t, task.Destroy(ctx, true))
	_, err = os.Stat(path)
	must.True(t, os.IsNotExist(err), must.Sprintf("cgroup %s still there: %v", path, err))
}

func TestCgroupUnusableRunsWithoutLimits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config("exit", "0")
	cfg.CgroupPath = filepath.Join(f.dir, "not-a-cgroup", "task") // a plain directory
	must.NoError(t, os.MkdirAll(filepath.Dir(cfg.CgroupPath), 0o755))
	task := startTask(t, cfg)
	must.Eq(t, "", task.State().Cgroup)
	must.Eq(t, 0, waitTask(t, task).ExitCode)
}

func TestCgroupOOMKill(t *testing.T) {
	t.Parallel()
	path := cgroupForTest(t)
	ctrl, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "cgroup.controllers"))
	if !hasWord(string(ctrl), "memory") {
		t.Skip("no memory controller for this cgroup's children: OOM kills cannot happen here")
	}
	f := newFixture(t)
	cfg := f.config("hog")
	cfg.CgroupPath = path
	cfg.MemoryMB = 32
	task := startTask(t, cfg)
	if _, err := os.Stat(filepath.Join(path, "memory.max")); err != nil {
		t.Skip("memory controller not delegated to this cgroup: OOM kills cannot happen here")
	}
	res := waitTask(t, task)
	must.True(t, res.OOMKilled, must.Sprintf("result %+v", res))
	must.Eq(t, 9, res.Signal)
}
