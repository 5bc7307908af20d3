package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// cpuWeight maps Nomad's CPU reservation (MHz, which Nomad also uses as
// cgroup v1 cpu.shares) to cgroup v2 cpu.weight with the same linear map as
// runc: shares 2..262144 onto weight 1..10000. 0 means "not set".
func cpuWeight(shares int64) uint64 {
	if shares <= 0 {
		return 0
	}
	if shares < 2 {
		shares = 2
	}
	if shares > 262144 {
		shares = 262144
	}
	return uint64(1 + ((shares-2)*9999)/262142)
}

// cgroupLimits are the files and values setupCgroup writes. Pure.
func cgroupLimits(cfg Config) [][2]string {
	var out [][2]string
	if w := cpuWeight(cfg.CPUShares); w > 0 {
		out = append(out, [2]string{"cpu.weight", strconv.FormatUint(w, 10)})
	}
	hard := cfg.MemoryMaxMB
	if hard == 0 {
		hard = cfg.MemoryMB
	}
	if hard > 0 {
		out = append(out, [2]string{"memory.max", strconv.FormatInt(hard<<20, 10)})
	}
	if cfg.MemoryMaxMB > cfg.MemoryMB && cfg.MemoryMB > 0 {
		out = append(out, [2]string{"memory.low", strconv.FormatInt(cfg.MemoryMB<<20, 10)})
	}
	return out
}

// cgroupUsable says why a cgroup v2 directory cannot be created under
// parent, or "" when it can.
func cgroupUsable(parent string) string {
	var sfs unix.Statfs_t
	if err := unix.Statfs(parent, &sfs); err != nil {
		return fmt.Sprintf("statfs %s: %v", parent, err)
	}
	if sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return parent + " is not on a cgroup v2 file system"
	}
	if err := unix.Access(parent, unix.W_OK); err != nil {
		return fmt.Sprintf("%s is not writable: %v", parent, err)
	}
	return ""
}

// setupCgroup creates the task's cgroup and writes its limits. It returns
// the cgroup to use, or "" with a logged reason when cgroup v2 is not
// usable here (the task then runs without limits). Limits whose controller
// is not available are logged and skipped.
func setupCgroup(cfg Config, log hclog.Logger) (string, error) {
	path := filepath.Clean(cfg.CgroupPath)
	parent := filepath.Dir(path)
	if why := cgroupUsable(parent); why != "" {
		log.Warn("running without cgroup: limits not enforced", "cgroup", path, "reason", why)
		return "", nil
	}
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		log.Warn("running without cgroup: limits not enforced", "cgroup", path, "reason", err.Error())
		return "", nil
	}
	enableControllers(parent, log)
	for _, kv := range cgroupLimits(cfg) {
		file := filepath.Join(path, kv[0])
		if _, err := os.Stat(file); err != nil {
			log.Warn("cgroup controller not available: limit not enforced", "file", kv[0], "value", kv[1])
			continue
		}
		if err := os.WriteFile(file, []byte(kv[1]), 0); err != nil {
			_ = os.Remove(path)
			return "", fmt.Errorf("write %s=%s: %w", kv[0], kv[1], err)
		}
	}
	return path, nil
}

// enableControllers turns on the cpu and memory controllers for parent's
// children when the parent has them but has not delegated them.
func enableControllers(parent string, log hclog.Logger) {
	avail, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return
	}
	on, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	for _, c := range []string{"cpu", "memory"} {
		if !hasWord(string(avail), c) || hasWord(string(on), c) {
			continue
		}
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
			log.Debug("cannot enable cgroup controller", "controller", c, "parent", parent, "error", err)
		}
	}
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// killCgroup SIGKILLs every process in the cgroup: cgroup.kill where the
// kernel has it, else each pid in cgroup.procs.
func killCgroup(path string) error {
	if path == "" {
		return nil
	}
	err := os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0)
	if err == nil || errors.Is(err, fs.ErrNotExist) && !dirExists(path) {
		return nil
	}
	b, rerr := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	if rerr != nil {
		if errors.Is(rerr, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("kill cgroup %s: %w", path, rerr)
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	return nil
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// removeCgroup kills what is left in the cgroup and removes it, retrying
// while the kernel still counts exiting processes (EBUSY).
func removeCgroup(ctx context.Context, path string) error {
	if path == "" {
		return nil
	}
	for {
		err := unix.Rmdir(path)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("remove cgroup %s: %w", path, err)
		}
		if err := killCgroup(path); err != nil {
			return err
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("remove cgroup %s: %w", path, ctx.Err())
		case <-t.C:
		}
	}
}

// cgroupOOMKills returns memory.events' oom_kill count (0 if unknown).
func cgroupOOMKills(path string) uint64 {
	if path == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(path, "memory.events"))
	if err != nil {
		return 0
	}
	m, err := parseFlatKeyed(string(b))
	if err != nil {
		return 0
	}
	return m["oom_kill"]
}
