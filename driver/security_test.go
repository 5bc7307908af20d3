package driver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-train/nomad-train/driver/proto/base"
	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/hclspec"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
)

// These tests play an attacker who can submit jobs to a client that runs
// the plugin (as root, as on a real Nomad client), and check that the job
// cannot reach further than its own task.

// mustRefuseForGood asserts a StartTask error that Nomad will not retry.
func mustRefuseForGood(t *testing.T, err error, want ...string) {
	t.Helper()
	must.Error(t, err)
	for _, w := range want {
		must.ErrorContains(t, err, w)
	}
	st := status.Convert(err)
	must.Eq(t, codes.InvalidArgument, st.Code())
	must.SliceLen(t, 1, st.Details())
	must.False(t, st.Details()[0].(*structs.RecoverableError).GetRecoverable())
}

// startOrRun starts the task; when the driver (wrongly) accepts it, the
// test waits for it to finish, so that whatever it did has happened by the
// time the test looks.
func startOrRun(t *testing.T, n *nomadClient, f *taskFixture) error {
	t.Helper()
	_, err := n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: f.cfg})
	if err == nil {
		waitTask(t, n, f, 30*time.Second)
		n.destroy(t, f.cfg.GetId())
	}
	return err
}

// TestWireTaskEnvCannotSetRuntimeVariables: a job's env cannot set the
// variables the runtime takes from the driver. Before, builtin = "external"
// with NOMAD_TRAIN_EXTERNAL_COMMAND in the job's env ran any program on a
// node whose allowed_command_dirs should have stopped it.
func TestWireTaskEnvCannotSetRuntimeVariables(t *testing.T) {
	emb, n, results := newGang(t)
	n.configure(t, `allowed_command_dirs = ["/opt/nomad-train-allowed"]`)
	task := func(builtin string, env map[string]string) *taskFixture {
		f := newTaskFixture(t, n, "worker", fmt.Sprintf(`
builtin      = %q
run_name     = "env"
world_size   = 1
storage_path = %q
rendezvous {
  backend = "embedded"
  address = %q
  timeout = "20s"
}
`, builtin, results, emb.URI))
		f.cfg.Env["NOMAD_ALLOC_INDEX"] = "0"
		for k, v := range env {
			f.cfg.Env[k] = v
		}
		return f
	}

	marker := filepath.Join(t.TempDir(), "escaped")
	f := task("external", map[string]string{
		"NOMAD_TRAIN_EXTERNAL_COMMAND": fmt.Sprintf(`["/bin/sh","-c","id > %s"]`, marker),
	})
	mustRefuseForGood(t, startOrRun(t, n, f), "NOMAD_TRAIN_EXTERNAL_COMMAND")
	_, err := os.Stat(marker)
	must.ErrorIs(t, err, os.ErrNotExist, must.Sprint("the job's command ran outside allowed_command_dirs"))

	f = task("quickstart", map[string]string{"RANK": "0", "MASTER_ADDR": "10.1.1.1", "NOMAD_TRAIN_SECRET_FILE": "/etc/shadow"})
	mustRefuseForGood(t, startOrRun(t, n, f), "MASTER_ADDR, NOMAD_TRAIN_SECRET_FILE, RANK")

	// A key with "=" is another variable than its name says (RANK=9 with
	// "" is RANK): not a way around the names above, nor around those
	// kept from the driver binary.
	f = task("quickstart", map[string]string{"RANK=9": "", "GODEBUG=x509sha1": "1"})
	mustRefuseForGood(t, startOrRun(t, n, f), `"GODEBUG=x509sha1", "RANK=9"`, "no variable names")

	// The runtime's tuning knobs (what nomad-train compile emits) are the
	// job's to set.
	f = task("no-such-builtin", map[string]string{"NOMAD_TRAIN_STOP_GRACE": "7s", "NOMAD_TRAIN_LOG_LEVEL": "debug", "NOMAD_TRAIN_BLAS": "gonum"})
	id := n.start(t, f).GetConfig().GetId()
	must.Eq(t, int32(2), n.wait(t, id).GetResult().GetExitCode())
	n.destroy(t, id)

	// A value they would refuse is refused here, once, not by a worker
	// exiting 2 at every restart.
	f = task("quickstart", map[string]string{"NOMAD_TRAIN_LEASE_TTL": "soon", "NOMAD_TRAIN_STORAGE_STALL_TIMEOUT": "-1s"})
	mustRefuseForGood(t, startOrRun(t, n, f), `NOMAD_TRAIN_LEASE_TTL="soon" is not a positive duration`,
		`NOMAD_TRAIN_STORAGE_STALL_TIMEOUT="-1s" is not a positive duration`)
}

// preloadSource is a shared object that records, in the file named by
// PRELOAD_MARK, every program it is loaded into.
const preloadSource = `
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
	const char *path = getenv("PRELOAD_MARK");
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (!path || n < 0) return;
	exe[n] = 0;
	FILE *f = fopen(path, "a");
	if (!f) return;
	fprintf(f, "%s uid=%d\n", exe, (int)getuid());
	fclose(f);
}
`

// buildPreload compiles preloadSource into dir, or skips without a C
// compiler.
func buildPreload(t *testing.T, dir string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build a preload library")
	}
	src := filepath.Join(dir, "mark.c")
	so := filepath.Join(dir, "mark.so")
	must.NoError(t, os.WriteFile(src, []byte(preloadSource), 0o644))
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Skipf("cannot build a preload library: %v: %s", err, out)
	}
	return so
}

// TestWireLoaderEnvNeverReachesDriverBinary: a job's LD_PRELOAD (and the
// other variables the loader, glibc and the Go runtime read at start) does
// not reach the processes that are the driver binary itself: a builtin
// worker and the wrapper of a command entrypoint. Before, a .so in the
// task's local/ dir ran inside the builtin worker (as root where the task
// names no user). The job's own program, run under the wrapper, still gets
// the job's env.
func TestWireLoaderEnvNeverReachesDriverBinary(t *testing.T) {
	emb, n, results := newGang(t)
	lib := buildPreload(t, t.TempDir())
	realBin, err := filepath.EvalSymlinks(pluginBin)
	must.NoError(t, err)
	sh, err := filepath.EvalSymlinks("/bin/sh")
	must.NoError(t, err)
	cases := []struct {
		name, entry string
		wantChild   bool // the job's own program saw the preload
	}{
		{"builtin worker", `builtin = "no-such-builtin"`, false},
		{"wrapper of a command", `command = "local/train.sh"`, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "loaded-into")
			fixtures := startTasks(t, n, 1, fmt.Sprintf(`
%s
run_name     = "preload"
world_size   = 1
storage_path = %q
rendezvous {
  backend = "embedded"
  address = %q
  timeout = "20s"
}
`, tc.entry, results, emb.URI), func(f *taskFixture) {
				must.NoError(t, os.WriteFile(filepath.Join(f.allocDir, "worker", "local", "train.sh"),
					[]byte("#!/bin/sh\necho \"child sees LD_PRELOAD=$LD_PRELOAD GODEBUG=$GODEBUG\"\n"), 0o755))
				for k, v := range map[string]string{"LD_PRELOAD": lib, "PRELOAD_MARK": mark, "GODEBUG": "x509sha1=1", "GLIBC_TUNABLES": "glibc.malloc.check=3"} {
					f.cfg.Env[k] = v
				}
			})
			f := fixtures[0]
			waitTask(t, n, f, 30*time.Second)
			if tc.wantChild {
				f.logs.waitFor(t, "child sees LD_PRELOAD="+lib+" GODEBUG=x509sha1=1", "")
			}
			n.destroy(t, f.cfg.GetId())
			b, err := os.ReadFile(mark)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				must.False(t, strings.HasPrefix(line, realBin+" "), must.Sprintf("the job's library ran inside the driver binary: %s", line))
			}
			must.Eq(t, tc.wantChild, strings.Contains(string(b), sh+" "), must.Sprintf("loaded into: %s", b))
		})
	}
}

// TestWireDeniedUsers: a job cannot pick a user the operator denies (root
// by default), by name or by uid, whatever the node's default_user is.
func TestWireDeniedUsers(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, `default_user = "nobody"`)
	for _, user := range []string{"root", "0"} {
		t.Run(user, func(t *testing.T) {
			f := newTaskFixture(t, n, "worker", shTask(`id -u`))
			f.cfg.User = user
			mustRefuseForGood(t, startOrRun(t, n, f), fmt.Sprintf("user %q", user), "denied_users")
		})
	}

	// A default_user the same config denies is a contradiction.
	ctx := testCtx(t)
	schema, err := n.base.ConfigSchema(ctx, &base.ConfigSchemaRequest{})
	must.NoError(t, err)
	_, err = n.base.SetConfig(ctx, newSetConfig(t, schema.GetSpec(), `default_user = "root"`))
	must.ErrorContains(t, err, `default_user "root" is in denied_users`)

	if os.Geteuid() != 0 {
		t.Skip("running a task as root needs a root plugin")
	}
	n.configure(t, `denied_users = []`)
	f := newTaskFixture(t, n, "worker", shTask(`echo "uid=$(id -u)"`))
	f.cfg.User = "root"
	id := n.start(t, f).GetConfig().GetId()
	must.Eq(t, int32(0), n.wait(t, id).GetResult().GetExitCode())
	f.logs.waitFor(t, "uid=0", "")
	n.destroy(t, id)
}

// swapRunner replaces a symlink between the driver's check of a command
// and the start of the process, then starts it with the real executor.
type swapRunner struct {
	Runner
	link, target string
}

func (r swapRunner) Start(ctx context.Context, s ProcessSpec) (Process, error) {
	tmp := r.link + ".new"
	if err := os.Symlink(r.target, tmp); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, r.link); err != nil {
		return nil, err
	}
	return r.Runner.Start(ctx, s)
}

// TestStartRunsTheCommandThatWasChecked: the driver executes the program
// it checked against allowed_command_dirs, not whatever a symlink points
// at by the time the process starts. Before, it checked the link's target
// but ran the link.
func TestStartRunsTheCommandThatWasChecked(t *testing.T) {
	dir := t.TempDir()
	allowed := filepath.Join(dir, "allowed")
	must.NoError(t, os.MkdirAll(allowed, 0o755))
	out := filepath.Join(dir, "ran")
	// The allowed program is a shell binary: sh -c reports its argv[0].
	sh, err := os.ReadFile("/bin/sh")
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(allowed, "train"), sh, 0o755))
	evil := filepath.Join(dir, "evil")
	must.NoError(t, os.WriteFile(evil, []byte(fmt.Sprintf("#!/bin/sh\necho evil >> %s\n", out)), 0o755))

	allocDir := t.TempDir()
	link := filepath.Join(allocDir, "w", "local", "train")
	must.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	must.NoError(t, os.Symlink(filepath.Join(allowed, "train"), link))
	d, err := New(Options{
		Runner:   swapRunner{Runner: ExecutorRunner{ShimPath: pluginBin}, link: link, target: evil},
		SelfPath: pluginBin, HostName: "host-a",
	})
	must.NoError(t, err)
	t.Cleanup(d.Close)
	d.setConfig(PluginConfig{AllowedCommandDirs: []string{allowed}, StatsInterval: time.Second}, nil)
	c := inMemoryClient(t, d)

	tc := fakeTaskConfig(t, allocDir, map[string]any{
		"command": "local/train", "args": []any{"-c", `echo "allowed as $0" >> ` + out},
		"launcher": "direct", "run_name": "r", "world_size": 1, "storage_path": dir})
	_, err = c.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: tc})
	must.NoError(t, err)
	res, err := c.WaitTask(testCtx(t), &drivers.WaitTaskRequest{TaskId: tc.GetId()})
	must.NoError(t, err)
	must.Eq(t, int32(0), res.GetResult().GetExitCode())
	_, err = c.DestroyTask(testCtx(t), &drivers.DestroyTaskRequest{TaskId: tc.GetId(), Force: true})
	must.NoError(t, err)
	b, err := os.ReadFile(out)
	must.NoError(t, err)
	must.Eq(t, "allowed as "+link+"\n", string(b)) // run as the job named it
}

// TestConsulTokenForWorkers: workers get a Consul token only when the
// operator configures one for tasks (task_consul_token) or the job brings
// its own; the plugin's consul_token stays with the plugin.
func TestConsulTokenForWorkers(t *testing.T) {
	cases := []struct {
		name    string
		plugin  PluginConfig
		taskEnv string // the job's own CONSUL_HTTP_TOKEN
		want    string // "" = unset
	}{
		{name: "plugin token stays with the plugin", plugin: PluginConfig{ConsulToken: "plugin-secret"}},
		{name: "task token", plugin: PluginConfig{ConsulToken: "plugin-secret", TaskConsulToken: "task-token"}, want: "task-token"},
		{name: "the job's own token wins", plugin: PluginConfig{TaskConsulToken: "task-token"}, taskEnv: "job-token", want: "job-token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &fakeRunner{}
			d := newTestDriver(t, nil, r)
			tc.plugin.StatsInterval = time.Second
			d.setConfig(tc.plugin, nil)
			task := fakeTaskConfig(t, t.TempDir(), map[string]any{"builtin": "quickstart", "run_name": "r", "world_size": 1, "storage_path": "/s"})
			if tc.taskEnv != "" {
				task.Env[envConsulToken] = tc.taskEnv
			}
			_, err := inMemoryClient(t, d).StartTask(context.Background(), &drivers.StartTaskRequest{Task: task})
			must.NoError(t, err)
			got, ok := "", false
			for _, kv := range r.started[0].Env {
				if k, v, _ := strings.Cut(kv, "="); k == envConsulToken {
					got, ok = v, true
				}
			}
			must.Eq(t, tc.want, got)
			must.Eq(t, tc.want != "", ok)
		})
	}
}

// newSetConfig is the SetConfig request the agent sends for body.
func newSetConfig(t *testing.T, spec *hclspec.Spec, body string) *base.SetConfigRequest {
	t.Helper()
	return &base.SetConfigRequest{
		MsgpackConfig:    nomadEncode(t, spec, body),
		NomadConfig:      &base.NomadConfig{Driver: &base.NomadDriverConfig{ClientMinPort: 14000, ClientMaxPort: 14512}},
		PluginApiVersion: APIVersion,
	}
}

// TestStartReadsOnlyARegularSecretFile: the task can write its secrets
// dir, and the plugin reads the run secret from it as root, so a
// symlink (to /dev/zero, or to a file only root may read), a FIFO (which
// blocked StartTask for good) or a huge file does not count as a secret.
func TestStartReadsOnlyARegularSecretFile(t *testing.T) {
	cases := []struct {
		name string
		make func(t *testing.T, path string)
	}{
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "root-only")
			must.NoError(t, os.WriteFile(target, []byte(fixtureSecret), 0o600))
			must.NoError(t, os.Symlink(target, path))
		}},
		{"fifo", func(t *testing.T, path string) { must.NoError(t, unix.Mkfifo(path, 0o600)) }},
		{"too large", func(t *testing.T, path string) {
			must.NoError(t, os.WriteFile(path, []byte(strings.Repeat("a", maxSecretSize+1)), 0o600))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDriver(t, nil, &fakeRunner{})
			task := fakeTaskConfig(t, t.TempDir(), map[string]any{"builtin": "quickstart", "run_name": "r", "world_size": 1, "storage_path": "/s"})
			path := filepath.Join(task.GetAllocDir(), task.GetName(), "secrets", secretFileName)
			must.NoError(t, os.Remove(path))
			tc.make(t, path)
			done := make(chan error, 1)
			go func() {
				_, err := inMemoryClient(t, d).StartTask(context.Background(), &drivers.StartTaskRequest{Task: task})
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				// Unblock every read stuck on the FIFO, then fail.
				for unblocked := false; !unblocked; {
					if f, ferr := os.OpenFile(path, os.O_WRONLY|unix.O_NONBLOCK, 0); ferr == nil {
						f.Close()
					}
					select {
					case <-done:
						unblocked = true
					case <-time.After(50 * time.Millisecond):
					}
				}
				t.Fatal("StartTask blocked reading the secrets dir")
			}
			must.ErrorContains(t, err, "no run secret")
		})
	}
}
