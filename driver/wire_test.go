package driver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/nomad-train/nomad-train/driver/proto/base"
	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
)

func TestWirePluginInfoSchemasFingerprint(t *testing.T) {
	n := launchPlugin(t)
	ctx := testCtx(t)

	info, err := n.base.PluginInfo(ctx, &base.PluginInfoRequest{})
	must.NoError(t, err)
	must.Eq(t, base.PluginType_DRIVER, info.GetType())
	must.Eq(t, PluginName, info.GetName())
	must.SliceContains(t, info.GetPluginApiVersions(), "v0.1.0")
	must.Eq(t, PluginVersion, info.GetPluginVersion())

	// The config-check launch: SetConfig without nomad_config.
	schema, err := n.base.ConfigSchema(ctx, &base.ConfigSchemaRequest{})
	must.NoError(t, err)
	must.MapContainsKeys(t, schema.GetSpec().GetObject().GetAttributes(), []string{"allowed_command_dirs", "consul_address", "gpu_stats", "stats_interval"})
	_, err = n.base.SetConfig(ctx, &base.SetConfigRequest{MsgpackConfig: nomadEncode(t, schema.GetSpec(), `stats_interval = "nope"`), PluginApiVersion: "v0.1.0"})
	must.ErrorContains(t, err, "stats_interval")

	n.configure(t, `
stats_interval = "150ms"
gpu_stats      = true
`)
	ts, err := n.driver.TaskConfigSchema(ctx, &drivers.TaskConfigSchemaRequest{})
	must.NoError(t, err)
	must.MapContainsKeys(t, ts.GetSpec().GetObject().GetAttributes(), []string{"builtin", "command", "run_name", "world_size", "rendezvous", "checkpoint", "failure"})

	caps, err := n.driver.Capabilities(ctx, &drivers.CapabilitiesRequest{})
	must.NoError(t, err)
	must.True(t, caps.GetCapabilities().GetSendSignals())
	must.True(t, caps.GetCapabilities().GetExec())
	must.Eq(t, drivers.DriverCapabilities_NONE, caps.GetCapabilities().GetFsIsolation())

	stream, err := n.driver.Fingerprint(ctx, &drivers.FingerprintRequest{})
	must.NoError(t, err)
	start := time.Now()
	for i := 0; i < 3; i++ { // the first at once, then every stats_interval
		fp, err := stream.Recv()
		must.NoError(t, err)
		must.Eq(t, drivers.FingerprintResponse_HEALTHY, fp.GetHealth())
		must.Eq(t, PluginVersion, fp.GetAttributes()[attrVersion].GetStringVal())
		nvmlAttr, ok := fp.GetAttributes()[attrNVML]
		must.True(t, ok)
		if !nvmlAttr.GetBoolVal() { // no GPU on this machine: CPU only, still healthy
			must.StrContains(t, fp.GetHealthDescription(), "no NVML")
		}
	}
	must.Less(t, 10*time.Second, time.Since(start))
}

func TestWireTaskLifecycle(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, `stats_interval = "1s"`)
	ctx := testCtx(t)

	events, err := n.driver.TaskEvents(ctx, &drivers.TaskEventsRequest{})
	must.NoError(t, err)

	script := `
echo "hello from $NOMAD_TRAIN_RUN rank-hint=$NOMAD_TRAIN_RANK_HINT addr=$NOMAD_TRAIN_ADDR"
echo "oops" >&2
printf '{"time":"2026-01-02T03:04:05Z","kind":"checkpoint_committed","message":"checkpoint 3 committed","attrs":{"step":"3"}}\n' >> "$NOMAD_TRAIN_EVENTS"
trap 'echo got-usr1; exit 3' USR1
while :; do sleep 0.05; done`
	f := newTaskFixture(t, n, "worker", shTask(script))
	h := n.start(t, f)
	id := h.GetConfig().GetId()

	f.logs.waitFor(t, "hello from wire rank-hint=2 addr=127.0.0.1:23456", "oops")

	ev, err := events.Recv()
	must.NoError(t, err)
	must.Eq(t, id, ev.GetTaskId())
	must.Eq(t, f.cfg.GetAllocId(), ev.GetAllocId())
	must.Eq(t, "worker", ev.GetTaskName())
	must.Eq(t, "checkpoint 3 committed", ev.GetMessage())
	must.Eq(t, map[string]string{"kind": "checkpoint_committed", "step": "3"}, ev.GetAnnotations())
	must.Eq(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ev.GetTimestamp().AsTime())

	ex, err := n.driver.ExecTask(ctx, &drivers.ExecTaskRequest{TaskId: id, Command: []string{"/bin/sh", "-c", `echo "exec sees $NOMAD_TRAIN_WORLD_SIZE"; echo err >&2; exit 4`}, Timeout: durationpb.New(5 * time.Second)})
	must.NoError(t, err)
	must.Eq(t, "exec sees 1\n", string(ex.GetStdout()))
	must.Eq(t, "err\n", string(ex.GetStderr()))
	must.Eq(t, int32(4), ex.GetResult().GetExitCode())

	stats, err := n.driver.TaskStats(ctx, &drivers.TaskStatsRequest{TaskId: id, CollectionInterval: durationpb.New(100 * time.Millisecond)})
	must.NoError(t, err)
	for i := 0; i < 2; i++ {
		s, err := stats.Recv()
		must.NoError(t, err)
		must.NotNil(t, s.GetStats().GetTimestamp())
		must.NotNil(t, s.GetStats().GetAggResourceUsage().GetCpu())
		must.NotNil(t, s.GetStats().GetAggResourceUsage().GetMemory())
		must.Positive(t, s.GetStats().GetAggResourceUsage().GetMemory().GetRss())
	}

	insp, err := n.driver.InspectTask(ctx, &drivers.InspectTaskRequest{TaskId: id})
	must.NoError(t, err)
	must.Eq(t, drivers.TaskState_RUNNING, insp.GetTask().GetState())

	_, err = n.driver.SignalTask(ctx, &drivers.SignalTaskRequest{TaskId: id, Signal: "SIGUSR1"})
	must.NoError(t, err)
	res := n.wait(t, id)
	must.Eq(t, int32(3), res.GetResult().GetExitCode())
	must.Eq(t, int32(0), res.GetResult().GetSignal())
	f.logs.waitFor(t, "got-usr1", "")

	// WaitTask after the exit answers at once, again.
	res = n.wait(t, id)
	must.Eq(t, int32(3), res.GetResult().GetExitCode())
	insp, err = n.driver.InspectTask(ctx, &drivers.InspectTaskRequest{TaskId: id})
	must.NoError(t, err)
	must.Eq(t, drivers.TaskState_EXITED, insp.GetTask().GetState())

	n.destroy(t, id)
	_, err = n.driver.InspectTask(ctx, &drivers.InspectTaskRequest{TaskId: id})
	must.Eq(t, codes.NotFound, status.Code(err))
	n.destroy(t, id) // unknown ids succeed
}

func TestWireStopTaskEscalatesToKill(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, ``)
	ctx := testCtx(t)

	cases := []struct {
		name       string
		script     string
		signal     string
		wantSignal int32
		wantCode   int32
	}{
		{"exits on the signal", `trap 'exit 5' TERM; echo ready; while :; do sleep 0.05; done`, "SIGTERM", 0, 5},
		{"ignores it and is killed", `trap '' TERM INT; echo ready; while :; do sleep 0.05; done`, "SIGTERM", 9, 137},
		{"no signal named means SIGINT", `trap 'exit 6' INT; echo ready; while :; do sleep 0.05; done`, "", 0, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newTaskFixture(t, n, "stopper", shTask(tc.script))
			id := n.start(t, f).GetConfig().GetId()
			f.logs.waitFor(t, "ready", "")
			begin := time.Now()
			_, err := n.driver.StopTask(ctx, &drivers.StopTaskRequest{TaskId: id, Signal: tc.signal, Timeout: durationpb.New(400 * time.Millisecond)})
			must.NoError(t, err)
			res := n.wait(t, id)
			must.Eq(t, tc.wantSignal, res.GetResult().GetSignal())
			must.Eq(t, tc.wantCode, res.GetResult().GetExitCode())
			if tc.wantSignal == 9 {
				must.Greater(t, 350*time.Millisecond, time.Since(begin)) // waited out the grace period
			}
			n.destroy(t, id)
		})
	}
}

func TestWireRecoverAfterPluginKilled(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, ``)
	release := filepath.Join(t.TempDir(), "release")
	script := `echo started; while [ ! -e "` + release + `" ]; do sleep 0.05; done; echo releasing; exit 7`
	f := newTaskFixture(t, n, "survivor", shTask(script))
	h := n.start(t, f)
	f.logs.waitFor(t, "started", "")

	n.killPlugin(t)

	// The agent starts a new plugin and recovers from the handle it
	// persisted; the client leaves task_id empty.
	n2 := launchPlugin(t)
	n2.configure(t, ``)
	ctx := testCtx(t)
	persisted := &drivers.TaskHandle{Version: h.GetVersion(), Config: &drivers.TaskConfig{Id: h.GetConfig().GetId(), Name: h.GetConfig().GetName(), AllocId: h.GetConfig().GetAllocId()}, State: h.GetState(), DriverState: h.GetDriverState()}
	_, err := n2.driver.RecoverTask(ctx, &drivers.RecoverTaskRequest{Handle: persisted})
	must.NoError(t, err)
	_, err = n2.driver.RecoverTask(ctx, &drivers.RecoverTaskRequest{Handle: persisted}) // idempotent
	must.NoError(t, err)

	id := h.GetConfig().GetId()
	insp, err := n2.driver.InspectTask(ctx, &drivers.InspectTaskRequest{TaskId: id})
	must.NoError(t, err)
	must.Eq(t, drivers.TaskState_RUNNING, insp.GetTask().GetState())

	must.NoError(t, os.WriteFile(release, nil, 0o644))
	res := n2.wait(t, id)
	must.Eq(t, int32(7), res.GetResult().GetExitCode())
	f.logs.waitFor(t, "releasing", "") // the FIFO writers outlived the first plugin
	n2.destroy(t, id)
}

func TestWireBadTaskConfigNamesTheField(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, `allowed_command_dirs = ["/opt/nomad-train-allowed"]`)
	ctx := testCtx(t)
	base := func(extra string) string {
		return `
run_name     = "bad"
world_size   = 2
storage_path = "/tmp/x"
` + extra
	}
	cases := []struct {
		name  string
		hcl   string
		patch func(*drivers.TaskConfig)
		want  string
	}{
		{name: "missing command", hcl: base(``), want: `field "command"`},
		{name: "world size too small", hcl: base(`command = "/bin/true"`) + "\n", patch: func(c *drivers.TaskConfig) {
			c.MsgpackDriverConfig = mustEncodeTaskConfig(t, map[string]any{"command": "/usr/bin/true", "run_name": "r", "world_size": 0, "storage_path": "/s"})
		}, want: `field "world_size"`},
		{name: "wrong type", hcl: base(`command = "/usr/bin/true"`), patch: func(c *drivers.TaskConfig) {
			c.MsgpackDriverConfig = mustEncodeTaskConfig(t, map[string]any{"command": "/usr/bin/true", "run_name": "r", "world_size": "many", "storage_path": "/s"})
		}, want: `field "world_size": a number is required`},
		{name: "unknown field", hcl: base(`command = "/usr/bin/true"`), patch: func(c *drivers.TaskConfig) {
			c.MsgpackDriverConfig = mustEncodeTaskConfig(t, map[string]any{"command": "/usr/bin/true", "run_name": "r", "world_size": 1, "storage_path": "/s", "gpus_per_worker": 2})
		}, want: `field "gpus_per_worker": unknown field`},
		{name: "bad score order", hcl: base(`command = "/usr/bin/true"
checkpoint {
  score_order = "up"
}`), want: `field "checkpoint.score_order"`},
		{name: "command outside allowed dirs", hcl: base(`command = "/bin/sh"`), want: `field "command": command is outside allowed_command_dirs`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newTaskFixture(t, n, "bad", tc.hcl)
			if tc.patch != nil {
				tc.patch(f.cfg)
			}
			_, err := n.driver.StartTask(ctx, &drivers.StartTaskRequest{Task: f.cfg})
			must.ErrorContains(t, err, tc.want)
			st := status.Convert(err)
			must.Eq(t, codes.InvalidArgument, st.Code())
			must.SliceLen(t, 1, st.Details())
			re, ok := st.Details()[0].(*structs.RecoverableError)
			must.True(t, ok, must.Sprintf("detail %T", st.Details()[0]))
			must.False(t, re.GetRecoverable())
		})
	}
}

func TestWireBuiltinRunsDriverBinaryAsWorker(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, ``)
	f := newTaskFixture(t, n, "builtin", `
builtin      = "no-such-builtin"
run_name     = "b"
world_size   = 1
storage_path = "/tmp/x"
rendezvous {
  backend = "embedded"
  address = "embedded://127.0.0.1:1"
}
`)
	id := n.start(t, f).GetConfig().GetId()
	res := n.wait(t, id)
	// The driver binary ran as a worker: the builtins package reports the
	// unknown builtin and exits 2.
	must.Eq(t, int32(2), res.GetResult().GetExitCode())
	f.logs.waitFor(t, "", `no builtin "no-such-builtin"`)
	n.destroy(t, id)
}

func TestWireExecStreaming(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, ``)
	f := newTaskFixture(t, n, "exec", shTask(`while :; do sleep 0.05; done`))
	id := n.start(t, f).GetConfig().GetId()
	ctx := testCtx(t)

	s, err := n.driver.ExecTaskStreaming(ctx)
	must.NoError(t, err)
	must.NoError(t, s.Send(&drivers.ExecTaskStreamingRequest{Setup: &drivers.ExecTaskStreamingRequest_Setup{TaskId: id, Command: []string{"/bin/sh", "-c", "read line; echo \"got $line\"; exit 9"}}}))
	must.NoError(t, s.Send(&drivers.ExecTaskStreamingRequest{Stdin: &drivers.ExecTaskStreamingIOOperation{Data: []byte("ping\n")}}))
	must.NoError(t, s.Send(&drivers.ExecTaskStreamingRequest{Stdin: &drivers.ExecTaskStreamingIOOperation{Close: true}}))
	var out strings.Builder
	for {
		r, err := s.Recv()
		must.NoError(t, err)
		out.Write(r.GetStdout().GetData())
		if r.GetExited() {
			must.Eq(t, int32(9), r.GetResult().GetExitCode())
			break
		}
	}
	must.Eq(t, "got ping\n", out.String())

	// With a terminal (nomad alloc exec -t): the command sees a tty of the
	// size the client sent.
	s, err = n.driver.ExecTaskStreaming(ctx)
	must.NoError(t, err)
	must.NoError(t, s.Send(&drivers.ExecTaskStreamingRequest{
		Setup:   &drivers.ExecTaskStreamingRequest_Setup{TaskId: id, Command: []string{"/bin/sh", "-c", "sleep 0.3; tty; stty size"}, Tty: true},
		TtySize: &drivers.ExecTaskStreamingRequest_TerminalSize{Height: 33, Width: 101},
	}))
	out.Reset()
	for {
		r, err := s.Recv()
		must.NoError(t, err)
		out.Write(r.GetStdout().GetData())
		if r.GetExited() {
			must.Eq(t, int32(0), r.GetResult().GetExitCode())
			break
		}
	}
	must.StrContains(t, out.String(), "/dev/pts/")
	must.StrContains(t, out.String(), "33 101")
	_, err = n.driver.StopTask(ctx, &drivers.StopTaskRequest{TaskId: id, Signal: "SIGKILL"})
	must.NoError(t, err)
	n.wait(t, id)
	n.destroy(t, id)
}
