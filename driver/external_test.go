package driver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
	"github.com/nomad-train/nomad-train/trainer/external"
	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// Which commands the driver wraps: workerenv.StartFor decides, with
// trainer/external's reading of the program.
func TestRunsExternal(t *testing.T) {
	cases := []struct {
		launcher, program string
		want              bool
	}{
		{LauncherAuto, "/bin/sh", true},           // not a Go program
		{LauncherAuto, pluginBin, false},          // a Go binary built with the trainer
		{LauncherExternal, pluginBin, true},       // forced
		{LauncherDirect, "/bin/sh", false},        // the program speaks the contract itself
		{LauncherAuto, "/no/such/program", false}, // left alone: starting it says what is wrong
	}
	for _, tc := range cases {
		t.Run(tc.launcher+" "+filepath.Base(tc.program), func(t *testing.T) {
			proc, err := workerenv.StartFor(workerenv.Entrypoint{Command: tc.program, Launcher: tc.launcher}, "/self", workerenv.SpeaksContract)
			must.NoError(t, err)
			must.Eq(t, tc.want, proc.External != nil)
			must.Eq(t, tc.want, proc.Path == "/self")
		})
	}
}

// The driver and the compiler agree on where the run secret is rendered.
func TestSecretFileMatchesCompiledTemplate(t *testing.T) {
	must.Eq(t, trainspec.SecretDestination, filepath.Join(filepath.Base(pathsOf(&drivers.TaskConfig{AllocDir: "/a", Name: "t"}).SecretsDir), secretFileName))
}

// externalScript is a worker command that is not a Go trainer: it prints
// the torchrun environment it got, asks for a checkpoint directory, writes
// into it and reports a metric with it, over the JSON-lines protocol on
// fds 3 (requests) and 4 (replies).
const externalScript = `#!/bin/sh
set -e
echo "torchrun-env RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT RESTARTS=$TORCHELASTIC_RESTART_COUNT FDS=$NOMAD_TRAIN_REQUEST_FD,$NOMAD_TRAIN_REPLY_FD"
echo '{"op":"checkpoint_dir"}' >&3
read -r reply <&4
dir=$(printf '%s\n' "$reply" | sed -n 's/.*"path":"\([^"]*\)".*/\1/p')
[ -n "$dir" ] || { echo "no checkpoint dir in: $reply" >&2; exit 1; }
echo "written by rank $RANK" > "$dir/rank-$RANK.txt"
printf '{"op":"report","metrics":{"loss":0.%s,"world":%s},"checkpoint":"%s"}\n' "$((RANK + 1))" "$WORLD_SIZE" "$dir" >&3
read -r reply <&4
echo "report reply: $reply"
`

// TestWireExternalCommandOnTwoTasks: a command entrypoint that is not a
// nomad-train Go trainer (a shell script fetched into the task dir, named
// by a relative path) runs, through the plugin binary, under the builtin
// "external": two tasks rendezvous through an embedded store, each script
// gets torchrun's environment, and their report and checkpoint land in
// the run's storage.
func TestWireExternalCommandOnTwoTasks(t *testing.T) {
	emb, n, results := newGang(t)
	fixtures := startTasks(t, n, 2, fmt.Sprintf(`
command      = "local/train.sh"
run_name     = "ext"
world_size   = 2
storage_path = %q
rendezvous {
  backend = "embedded"
  address = %q
  timeout = "20s"
}
`, results, emb.URI), func(f *taskFixture) {
		must.NoError(t, os.WriteFile(filepath.Join(f.allocDir, "worker", "local", "train.sh"), []byte(externalScript), 0o755))
	})
	ports := map[string]bool{}
	envLine := regexp.MustCompile(`torchrun-env RANK=(\d) WORLD_SIZE=2 LOCAL_RANK=(\d) LOCAL_WORLD_SIZE=2 GROUP_RANK=0 MASTER_ADDR=127\.0\.0\.1 MASTER_PORT=(\d+) RESTARTS=0 FDS=3,4`)
	for i, f := range fixtures {
		res := waitTask(t, n, f, 30*time.Second)
		must.Eq(t, int32(0), res.GetResult().GetExitCode(), must.Sprintf("worker %d", i))
		f.logs.waitFor(t, "report reply: {\"ok\":true", "")
		f.logs.mu.Lock()
		m := envLine.FindStringSubmatch(f.logs.stdout.String())
		f.logs.mu.Unlock()
		must.NotNil(t, m, must.Sprintf("worker %d got no torchrun env", i))
		must.Eq(t, fmt.Sprint(i), m[1], must.Sprint("rank follows the alloc index"))
		must.Eq(t, m[1], m[2], must.Sprint("both tasks are on node-a: local rank = rank"))
		ports[m[3]] = true
		n.destroy(t, f.cfg.GetId())
	}
	must.MapLen(t, 1, ports, must.Sprint("both ranks got the same MASTER_PORT"))

	st, err := storage.OpenReadOnly(results, "ext", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.SliceLen(t, 1, recs)
	must.Eq(t, 0.1, recs[0].Metrics["loss"].(float64)) // rank 0's report
	must.Eq(t, 2.0, recs[0].Metrics["world"].(float64))
	_, dir, ok, err := st.Latest()
	must.NoError(t, err)
	must.True(t, ok)
	for r := range 2 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.txt", r)))
		must.NoError(t, err)
		must.Eq(t, fmt.Sprintf("written by rank %d\n", r), string(b))
	}
}

// TestWireTorchDDPOnTwoTasks runs examples/torch/train.py (PyTorch DDP over
// Gloo) as two tasks through the plugin binary, where Debian's
// python3-torch is installed.
func TestWireTorchDDPOnTwoTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: importing torch in two processes takes ~20 s")
	}
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import torch, torch.distributed as d; assert d.is_gloo_available()").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch with Gloo (apt-get install python3-torch): %v: %s", python, err, out)
	}
	script, err := filepath.Abs(filepath.Join("..", "examples", "torch", "train.py"))
	must.NoError(t, err)
	emb, n, results := newGang(t)
	fixtures := startTasks(t, n, 2, fmt.Sprintf(`
command      = %q
args         = [%q]
run_name     = "torch"
world_size   = 2
train_config = "{\"epochs\":2,\"lr\":0.05}"
storage_path = %q
rendezvous {
  backend = "embedded"
  address = %q
}
checkpoint {
  num_to_keep = 2
}
`, python, script, results, emb.URI), func(f *taskFixture) {
		// The compiled job's env, as the client interpolates it: each
		// task's own port "torch"; rank 0's is MASTER_PORT.
		port, err := external.FreePort()
		must.NoError(t, err)
		f.cfg.Env[workerenv.TorchPort] = strconv.Itoa(port)
	})
	for i, f := range fixtures {
		res := waitTask(t, n, f, 2*time.Minute)
		must.Eq(t, int32(0), res.GetResult().GetExitCode(), must.Sprintf("worker %d", i))
		n.destroy(t, f.cfg.GetId())
	}
	st, err := storage.OpenReadOnly(results, "torch", storage.Policy{})
	must.NoError(t, err)
	recs, err := st.Records()
	must.NoError(t, err)
	must.SliceLen(t, 2, recs) // one report per epoch
	must.Less(t, recs[0].Metrics["loss"].(float64), recs[1].Metrics["loss"].(float64))
	_, _, ok, err := st.Latest()
	must.NoError(t, err)
	must.True(t, ok)
}

// newGang starts what the tasks of one run need on a client: an embedded
// rendezvous store keyed with fixtureSecret, a configured plugin and an
// empty storage path.
func newGang(t *testing.T) (*rendezvous.Embedded, *nomadClient, string) {
	t.Helper()
	emb, err := rendezvous.StartEmbedded(testCtx(t), "127.0.0.1:0", []byte(fixtureSecret), hclog.NewNullLogger())
	must.NoError(t, err)
	t.Cleanup(func() { emb.Close() })
	n := launchPlugin(t)
	n.configure(t, ``)
	return emb, n, t.TempDir()
}

// startTasks starts count tasks "worker" of one run with the given
// config, as Nomad would for a group of that count; prepare (if any) lays
// out each task dir first.
func startTasks(t *testing.T, n *nomadClient, count int, configHCL string, prepare func(*taskFixture)) []*taskFixture {
	t.Helper()
	var fixtures []*taskFixture
	for i := range count {
		f := newTaskFixture(t, n, "worker", configHCL)
		f.cfg.Env["NOMAD_ALLOC_INDEX"] = fmt.Sprint(i)
		f.cfg.Env["NOMAD_ADDR_train"] = freeAddr(t)
		if prepare != nil {
			prepare(f)
		}
		fixtures = append(fixtures, f)
	}
	for _, f := range fixtures {
		n.start(t, f)
	}
	return fixtures
}

// waitTask waits up to limit for the task to exit, logging its stderr when
// it failed.
func waitTask(t *testing.T, n *nomadClient, f *taskFixture, limit time.Duration) *drivers.WaitTaskResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	res, err := n.driver.WaitTask(ctx, &drivers.WaitTaskRequest{TaskId: f.cfg.GetId()})
	must.NoError(t, err)
	if res.GetResult().GetExitCode() != 0 {
		f.logs.mu.Lock()
		t.Logf("task %s stdout: %s\nstderr: %s", f.cfg.GetId(), f.logs.stdout.String(), f.logs.stderr.String())
		f.logs.mu.Unlock()
	}
	return res
}

// TestWireTaskWithoutSecret: a job without the run secret's template (or
// whose Variable lacks the item) is refused for good with the way out,
// unless the operator allows unauthenticated workers on the node.
func TestWireTaskWithoutSecret(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, ``)
	f := newTaskFixture(t, n, "open", shTask(`echo "secret file: [$NOMAD_TRAIN_SECRET_FILE]"`))
	secret := filepath.Join(f.allocDir, "open", "secrets", secretFileName)
	for _, content := range []*string{nil, new("\n")} {
		if content == nil {
			must.NoError(t, os.Remove(secret))
		} else {
			must.NoError(t, os.WriteFile(secret, []byte(*content), 0o600))
		}
		_, err := n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: f.cfg})
		must.ErrorContains(t, err, "no run secret")
		must.ErrorContains(t, err, "nomad var put nomad/jobs/train-job secret=")
		must.ErrorContains(t, err, "allow_unauthenticated = true")
		st := status.Convert(err)
		must.Eq(t, codes.InvalidArgument, st.Code())
		must.SliceLen(t, 1, st.Details())
		must.False(t, st.Details()[0].(*structs.RecoverableError).GetRecoverable())
	}

	n.configure(t, `allow_unauthenticated = true`)
	id := n.start(t, f).GetConfig().GetId()
	must.Eq(t, int32(0), n.wait(t, id).GetResult().GetExitCode())
	f.logs.waitFor(t, "secret file: []", "")
	n.destroy(t, id)
}
