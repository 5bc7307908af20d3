package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
	"golang.org/x/sys/unix"
)

// The attacks below are a task's: Nomad gives the task's user its
// private directory (mode 0777, no sticky bit), where the driver keeps
// the state dir, so the task can rename the state dir and put its own in
// its place.

// nobody is the unprivileged user the attacks run as.
const nobody = 65534

// plantedSpec is a spec.json an attacker writes: run a shell as whoever
// the shim is (Cred null), which leaves a mark.
func plantedSpec(t *testing.T, mark string) []byte {
	t.Helper()
	b, err := json.Marshal(shimSpec{TaskID: "x", Path: "/bin/sh", Args: []string{"sh", "-c", "id -u > " + mark}, Dir: "/"})
	must.NoError(t, err)
	return b
}

// A state dir that is not the plugin's own at Start (a task's, or a link
// to some other directory) is refused; nothing in it is run, read or
// written.
func TestStartRefusesAStateDirNotItsOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the task's directory must belong to another user")
	}
	f := newFixture(t)
	mark := filepath.Join(f.dir, "mark")

	cfg := f.config("exit", "0")
	must.NoError(t, os.Mkdir(cfg.StateDir, 0o777))
	must.NoError(t, os.Chown(cfg.StateDir, nobody, nobody))
	must.NoError(t, os.WriteFile(filepath.Join(cfg.StateDir, specFile), plantedSpec(t, mark), 0o644))
	_, err := Start(context.Background(), cfg, hclog.NewNullLogger())
	must.ErrorIs(t, err, errNotOurStateDir)
	must.StrContains(t, err.Error(), "owned by uid 65534")

	// A link to a directory of root's, which Start would otherwise
	// clear of its spec.json and write into.
	victim := filepath.Join(f.dir, "victim")
	must.NoError(t, os.Mkdir(victim, 0o700))
	must.NoError(t, os.WriteFile(filepath.Join(victim, specFile), []byte("root's own"), 0o600))
	cfg.StateDir = filepath.Join(f.dir, "link")
	must.NoError(t, os.Symlink(victim, cfg.StateDir))
	_, err = Start(context.Background(), cfg, hclog.NewNullLogger())
	must.ErrorIs(t, err, errNotOurStateDir)
	b, err := os.ReadFile(filepath.Join(victim, specFile))
	must.NoError(t, err)
	must.EqOp(t, "root's own", string(b))

	// Its parent (the task's private directory) a link: nothing is made
	// where it leads.
	must.NoError(t, os.Symlink(victim, filepath.Join(f.dir, "private")))
	cfg.StateDir = filepath.Join(f.dir, "private", "train-x")
	_, err = Start(context.Background(), cfg, hclog.NewNullLogger())
	must.ErrorIs(t, err, errNotOurStateDir)
	_, err = os.Stat(filepath.Join(victim, "train-x"))
	must.ErrorIs(t, err, os.ErrNotExist)

	time.Sleep(200 * time.Millisecond)
	_, err = os.Stat(mark)
	must.ErrorIs(t, err, os.ErrNotExist)
}

// A state dir swapped while the task runs neither feeds the plugin a
// forged exit nor is removed by Destroy; the real one's record is what
// counts, had the plugin restarted or not.
func TestSwappedStateDirIsNotBelieved(t *testing.T) {
	f := newFixture(t)
	cfg := f.config("trap")
	task, err := Start(context.Background(), cfg, hclog.NewNullLogger())
	must.NoError(t, err)
	expectLine(t, f.outLines, "ready")

	// Another directory at the path, even one the attacker somehow made
	// with the plugin's owner and mode, with a made-up exit.
	moved := cfg.StateDir + ".moved"
	must.NoError(t, os.Rename(cfg.StateDir, moved))
	must.NoError(t, os.Mkdir(cfg.StateDir, 0o700))
	forged, err := json.Marshal(ExitResult{ExitCode: 0, At: time.Now()})
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(cfg.StateDir, exitFile), forged, 0o600))

	_, _, err = readExitFile(task.State())
	must.ErrorIs(t, err, errNotOurStateDir)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must.NoError(t, task.Stop(ctx, unix.SIGKILL, 0))
	_, err = task.Wait(ctx) // the driver reports it as exit code -1 with this error
	must.ErrorIs(t, err, errNotOurStateDir)
	err = task.Destroy(ctx, true)
	must.ErrorIs(t, err, errNotOurStateDir)
	must.FileExists(t, filepath.Join(cfg.StateDir, exitFile)) // not the plugin's to remove

	// The real directory, put back, holds the shim's record of the kill.
	must.NoError(t, os.RemoveAll(cfg.StateDir))
	must.NoError(t, os.Rename(moved, cfg.StateDir))
	res, ok, err := readExitFile(task.State())
	must.NoError(t, err)
	must.True(t, ok)
	must.EqOp(t, int(unix.SIGKILL), res.Signal)
	must.NoError(t, removeStateDir(cfg.StateDir, task.State().StateDirDev, task.State().StateDirIno))
	_, err = os.Stat(cfg.StateDir)
	must.ErrorIs(t, err, os.ErrNotExist)
}

// envAttacker makes the test binary the attacker of
// TestTaskCannotRunItsOwnSpecAsRoot: a process of user nobody that
// watches the private directory and, as soon as a state dir appears,
// renames it and fills its own in its place with spec.json.
const envAttacker = "EXECUTOR_TEST_ATTACKER"

func attackerMain(private string, spec []byte) int {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		fmt.Println("inotify:", err)
		return 1
	}
	if _, err := unix.InotifyAddWatch(fd, private, unix.IN_CREATE); err != nil {
		fmt.Println("watch:", err)
		return 1
	}
	fmt.Println("watching")
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if err != nil {
			return 1
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)], "\x00"))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_ISDIR == 0 || !strings.HasPrefix(name, "train-") {
				continue
			}
			p := filepath.Join(private, name)
			if err := os.Rename(p, p+".old"); err != nil {
				fmt.Println("rename:", err)
				return 1
			}
			if err := os.Mkdir(p, 0o777); err != nil {
				fmt.Println("mkdir:", err)
				return 1
			}
			fmt.Println("swapped")
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
				tmp := filepath.Join(p, ".x")
				_ = os.WriteFile(tmp, spec, 0o644)
				_ = os.Rename(tmp, filepath.Join(p, specFile))
			}
			return 0
		}
	}
}

// The attack as a task would make it, with another process of user
// nobody racing the plugin's Start: whatever the timing, the task runs as
// the user it asked for, or does not start; never the attacker's spec as
// root.
func TestTaskCannotRunItsOwnSpecAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the attacker runs as another user")
	}
	// A copy of this binary nobody may run, in a directory nobody may
	// enter (a test's temporary directory is closed to others).
	bin, err := os.MkdirTemp("", "executor-attack-")
	must.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(bin) })
	must.NoError(t, os.Chmod(bin, 0o755))
	self := filepath.Join(bin, "executor.test")
	copyExecutable(t, os.Args[0], self)

	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			base, err := os.MkdirTemp(bin, "task-")
			must.NoError(t, err)
			must.NoError(t, os.Chmod(base, 0o755))
			private := filepath.Join(base, "private") // as Nomad makes it
			must.NoError(t, os.Mkdir(private, 0o777))
			must.NoError(t, os.Chmod(private, 0o777))
			must.NoError(t, os.Chown(private, nobody, nobody))
			mark := filepath.Join(base, "mark")
			must.NoError(t, os.WriteFile(mark, nil, 0o666))
			must.NoError(t, os.Chmod(mark, 0o666))

			att := exec.Command(self)
			att.Env = []string{envAttacker + "=" + private, "ATTACK_SPEC=" + string(plantedSpec(t, mark))}
			att.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			out, err := att.StdoutPipe()
			must.NoError(t, err)
			must.NoError(t, att.Start())
			t.Cleanup(func() { _ = att.Process.Kill(); _ = att.Wait() })
			line := make([]byte, 9)
			_, err = io.ReadFull(out, line)
			must.NoError(t, err)
			must.EqOp(t, "watching\n", string(line))

			cfg := Config{TaskID: "victim", Command: "/bin/sh", Args: []string{"-c", "id -u >> " + mark + "; sleep 1"},
				Env: []string{"PATH=/usr/bin:/bin"}, Dir: base, User: "nobody",
				StateDir: filepath.Join(private, "train-victim"), ShimPath: self}
			task, err := Start(context.Background(), cfg, hclog.NewNullLogger())
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = task.Wait(ctx)
				_ = task.Destroy(ctx, true)
			} else {
				must.ErrorIs(t, err, errNotOurStateDir)
			}
			time.Sleep(300 * time.Millisecond) // an attacker's spec would have run by now
			b, err := os.ReadFile(mark)
			must.NoError(t, err)
			for _, uid := range strings.Fields(string(b)) {
				must.EqOp(t, fmt.Sprint(nobody), uid, must.Sprintf("start error %v", err))
			}
		})
	}
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(to, b, 0o755))
}
