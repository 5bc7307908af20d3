package driver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// fakeProcess runs until signalled; the signal number becomes its exit code.
type fakeProcess struct {
	exited chan ExitStatus
	done   chan struct{}
}

func newFakeProcess() *fakeProcess {
	return &fakeProcess{exited: make(chan ExitStatus, 1), done: make(chan struct{})}
}

func (p *fakeProcess) PID() int             { return 4242 }
func (p *fakeProcess) StartedAt() time.Time { return time.Unix(1, 0) }
func (p *fakeProcess) SaveState() (json.RawMessage, error) {
	return json.RawMessage(`{"fake":true}`), nil
}
func (p *fakeProcess) Wait(ctx context.Context) (ExitStatus, error) {
	select {
	case e := <-p.exited:
		close(p.done)
		return e, nil
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}
func (p *fakeProcess) Signal(sig syscall.Signal) error {
	select {
	case p.exited <- ExitStatus{ExitCode: int(sig)}:
	default:
	}
	return nil
}
func (p *fakeProcess) Stop(ctx context.Context, sig syscall.Signal, _ time.Duration) error {
	_ = p.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (p *fakeProcess) Destroy(context.Context, bool) error  { return nil }
func (p *fakeProcess) Stats(context.Context) (Usage, error) { return Usage{RSS: 1}, nil }
func (p *fakeProcess) Exec(context.Context, []string, time.Duration) ([]byte, []byte, int, error) {
	return []byte("out"), nil, 0, nil
}
func (p *fakeProcess) ExecStreaming(_ context.Context, _ []string, _ bool, stdin io.Reader, stdout, _ io.Writer, _ <-chan TermSize) (int, error) {
	_, err := io.Copy(stdout, stdin)
	return 0, err
}

// inMemoryClient serves d over an in-memory go-plugin gRPC connection.
func inMemoryClient(t *testing.T, d *Driver) drivers.DriverClient {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, PluginSet(d))
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(PluginSetDriver)
	must.NoError(t, err)
	return raw.(drivers.DriverClient)
}

// fakeTaskConfig is task "w" of allocation "a1" under allocDir, whose
// secrets dir holds the run secret.
func fakeTaskConfig(t *testing.T, allocDir string, cfg map[string]any) *drivers.TaskConfig {
	t.Helper()
	must.NoError(t, os.MkdirAll(filepath.Join(allocDir, "w", "secrets"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(allocDir, "w", "secrets", secretFileName), []byte("s3cret"), 0o600))
	return &drivers.TaskConfig{
		Id: "a1/w/0001", Name: "w", AllocId: "a1", AllocDir: allocDir, JobId: "job-a", Namespace: "ml",
		MsgpackDriverConfig: mustEncodeTaskConfig(t, cfg),
		Env:                 map[string]string{"NOMAD_ALLOC_INDEX": "1", "NOMAD_ADDR_coll": "10.0.0.5:31000"},
		DeviceEnv:           map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb"},
	}
}

func TestStartErrorsCarryRecoverability(t *testing.T) {
	cases := []struct {
		name        string
		err         error
		code        codes.Code
		recoverable bool
	}{
		{"transient", Retryable(errors.New("fork: resource temporarily unavailable")), codes.FailedPrecondition, true},
		{"permanent", errors.New("unknown user"), codes.Internal, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDriver(t, nil, &fakeRunner{startErr: tc.err})
			c := inMemoryClient(t, d)
			_, err := c.StartTask(context.Background(), &drivers.StartTaskRequest{Task: fakeTaskConfig(t, t.TempDir(), map[string]any{
				"command": "/bin/true", "run_name": "r", "world_size": 1, "storage_path": "/s"})})
			st := status.Convert(err)
			must.Eq(t, tc.code, st.Code())
			must.SliceLen(t, 1, st.Details())
			must.Eq(t, tc.recoverable, st.Details()[0].(*structs.RecoverableError).GetRecoverable())
		})
	}
}

func TestStartTaskEnvironment(t *testing.T) {
	r := &fakeRunner{}
	d := newTestDriver(t, dgxh100.New(), r)
	d.setConfig(PluginConfig{GPUStats: true, StatsInterval: time.Second, ConsulAddress: "consul.local:8500", DefaultUser: "trainer"}, nil)
	allocDir := t.TempDir()
	c := inMemoryClient(t, d)
	cases := []struct {
		name string
		cfg  map[string]any
		want map[string]string
		gone []string
		cmd  string
		args []string
	}{
		{
			name: "builtin with embedded rendezvous",
			cfg: map[string]any{"builtin": "quickstart", "run_name": "qs", "world_size": 4, "storage_path": "/results", "port": "coll",
				"train_config": `{"epochs":2}`,
				"rendezvous":   map[string]any{"backend": "embedded", "address": "embedded://10.0.0.1:7777", "timeout": "2m"},
				"checkpoint":   map[string]any{"num_to_keep": 2, "score_attribute": "loss", "score_order": "min"},
				"failure":      map[string]any{"max_failures": 3}},
			want: map[string]string{
				workerenv.Worker: "1", workerenv.RunName: "qs", workerenv.WorldSize: "4", workerenv.RankHint: "1",
				workerenv.MemberID: "a1.w", workerenv.Node: "host-a", workerenv.Addr: "10.0.0.5:31000",
				workerenv.Rendezvous: "embedded://10.0.0.1:7777", workerenv.RendezvousTimeout: "2m0s",
				workerenv.StoragePath: "/results", workerenv.Config: `{"epochs":2}`,
				workerenv.Checkpoint:  `{"num_to_keep":2,"score_attribute":"loss","score_order":"min"}`,
				workerenv.MaxFailures: "3", workerenv.Builtin: "quickstart",
				workerenv.Events:       filepath.Join(allocDir, "w", "local", eventsFileName),
				workerenv.SecretFile:   filepath.Join(allocDir, "w", "secrets", secretFileName),
				"CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb", "NVIDIA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb",
			},
			gone: []string{"CONSUL_HTTP_ADDR"},
			cmd:  "/bin/true", args: []string{"worker"},
		},
		{
			name: "command that is not a Go trainer runs under the builtin external",
			cfg:  map[string]any{"command": "/bin/echo", "args": []any{"a", "b"}, "run_name": "r", "world_size": 2, "storage_path": "/s"},
			want: map[string]string{
				workerenv.Rendezvous: "consul:///nomad-train/ml/job-a/", "CONSUL_HTTP_ADDR": "consul.local:8500", workerenv.Addr: "127.0.0.1:0",
				workerenv.MaxFailures: "0", workerenv.RendezvousTimeout: "5m0s",
				workerenv.Builtin: workerenv.ExternalBuiltin, workerenv.ExternalCommand: `["/bin/echo","a","b"]`,
			},
			gone: []string{workerenv.Checkpoint}, // no retention policy: keep all
			cmd:  "/bin/true", args: []string{"worker"},
		},
		{
			name: "launcher direct runs the command itself",
			cfg:  map[string]any{"command": "/bin/echo", "args": []any{"a", "b"}, "launcher": "direct", "run_name": "r", "world_size": 2, "storage_path": "/s"},
			want: map[string]string{workerenv.Rendezvous: "consul:///nomad-train/ml/job-a/", workerenv.Worker: "1"},
			gone: []string{workerenv.Builtin, workerenv.ExternalCommand},
			cmd:  "/bin/echo", args: []string{"a", "b"},
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tcfg := fakeTaskConfig(t, allocDir, tc.cfg)
			tcfg.Id = tcfg.Id + string(rune('a'+i))
			_, err := c.StartTask(context.Background(), &drivers.StartTaskRequest{Task: tcfg})
			must.NoError(t, err)
			spec := r.started[len(r.started)-1]
			must.Eq(t, tc.cmd, spec.Command)
			must.Eq(t, tc.args, spec.Args)
			must.Eq(t, "trainer", spec.User)
			must.Eq(t, filepath.Join(allocDir, "w"), spec.Dir)
			env := map[string]string{}
			for _, kv := range spec.Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			for k, v := range tc.want {
				must.Eq(t, v, env[k], must.Sprintf("env %s", k))
			}
			for _, k := range tc.gone {
				_, ok := env[k]
				must.False(t, ok, must.Sprintf("env %s should be unset", k))
			}
		})
	}
}

func TestNoGPUReservationHidesGPUs(t *testing.T) {
	tc := &drivers.TaskConfig{Name: "w", AllocId: "a"}
	env := workerEnv(envInput{Task: tc, Config: TaskConfig{RunName: "r", WorldSize: 1}, NodeHasGPUs: true})
	must.SliceContains(t, env, "CUDA_VISIBLE_DEVICES=")
	must.SliceContains(t, env, "NVIDIA_VISIBLE_DEVICES=void")
	env = workerEnv(envInput{Task: tc, Config: TaskConfig{RunName: "r", WorldSize: 1}, NodeHasGPUs: false})
	for _, kv := range env {
		must.False(t, strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES="))
	}
}

func TestResolveCommand(t *testing.T) {
	dir := t.TempDir()
	allowed := filepath.Join(dir, "allowed")
	must.NoError(t, os.MkdirAll(filepath.Join(allowed, "bin"), 0o755))
	prog := filepath.Join(allowed, "bin", "train")
	must.NoError(t, os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755))
	outside := filepath.Join(dir, "outside")
	must.NoError(t, os.WriteFile(outside, []byte("#!/bin/sh\n"), 0o755))
	sneaky := filepath.Join(allowed, "sneaky")
	must.NoError(t, os.Symlink(outside, sneaky))
	must.NoError(t, os.WriteFile(filepath.Join(allowed, "data"), nil, 0o644))

	link := filepath.Join(dir, "link")
	must.NoError(t, os.Symlink(prog, link))

	p, err := resolveCommand(prog, dir, "", []string{allowed})
	must.NoError(t, err)
	must.Eq(t, program{Path: prog, Name: prog}, p)
	p, err = resolveCommand("train", dir, filepath.Join(allowed, "bin"), []string{allowed})
	must.NoError(t, err)
	must.Eq(t, program{Path: prog, Name: prog}, p)
	p, err = resolveCommand("allowed/bin/train", dir, "", nil)
	must.NoError(t, err)
	must.Eq(t, program{Path: prog, Name: prog}, p)
	// Under allowed dirs the checked file runs, under the name the job gave.
	p, err = resolveCommand("link", dir, dir, []string{allowed})
	must.NoError(t, err)
	must.Eq(t, program{Path: prog, Name: link}, p)

	_, err = resolveCommand(outside, dir, "", []string{allowed})
	must.ErrorIs(t, err, ErrCommandNotAllowed)
	_, err = resolveCommand(sneaky, dir, "", []string{allowed}) // a symlink out is still out
	must.ErrorIs(t, err, ErrCommandNotAllowed)
	_, err = resolveCommand(allowed+"x/bin/train", dir, "", []string{allowed})
	must.ErrorContains(t, err, "not an executable")
	_, err = resolveCommand(filepath.Join(allowed, "data"), dir, "", nil)
	must.ErrorContains(t, err, "not an executable")
	_, err = resolveCommand("no-such-program-xyz", dir, "/nonexistent", nil)
	must.ErrorContains(t, err, "not found in PATH")
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "hup": syscall.SIGHUP, "SIGUSR1": syscall.SIGUSR1, "9": syscall.SIGKILL} {
		got, err := parseSignal(in)
		must.NoError(t, err)
		must.Eq(t, want, got)
	}
	_, err := parseSignal("SIGNOPE")
	must.ErrorContains(t, err, "SIGNOPE")
}

func TestSplitEvents(t *testing.T) {
	in := []byte(`{"time":"2026-01-01T00:00:00Z","kind":"rendezvous_complete","message":"gen 1","attrs":{"generation":"1"}}
not json

{"kind":"generation_changed"}
{"kind":"checkpoint_comm`)
	evs, n, bad := splitEvents(in)
	must.SliceLen(t, 2, evs)
	must.Eq(t, "rendezvous_complete", evs[0].Kind)
	must.Eq(t, "1", evs[0].Attrs["generation"])
	must.Eq(t, []string{"not json"}, bad)
	must.Eq(t, `{"kind":"checkpoint_comm`, string(in[n:])) // the partial line waits

	ev := toDriverEvent(&drivers.TaskConfig{Id: "i", AllocId: "a", Name: "n"}, evs[1], time.Unix(5, 0))
	must.Eq(t, "generation_changed", ev.GetMessage())
	must.Eq(t, map[string]string{"kind": "generation_changed"}, ev.GetAnnotations())
	must.Eq(t, time.Unix(5, 0).UTC(), ev.GetTimestamp().AsTime())
}

func TestEventTailerFollowsAppendsAndTruncation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	var got []string
	tl := &eventTailer{path: path, interval: time.Hour, logger: hclogNull(), publish: func(ev workerenv.Event) { got = append(got, ev.Kind) }}
	tl.poll() // no file yet: nothing, no error
	must.NoError(t, os.WriteFile(path, []byte(`{"kind":"a"}`+"\n"+`{"kind":"b"`), 0o644))
	tl.poll()
	must.Eq(t, []string{"a"}, got)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	must.NoError(t, err)
	_, err = f.WriteString("}\n")
	must.NoError(t, err)
	must.NoError(t, f.Close())
	tl.poll()
	must.Eq(t, []string{"a", "b"}, got)
	must.NoError(t, os.WriteFile(path, []byte(`{"kind":"c"}`+"\n"), 0o644)) // replaced, shorter
	tl.poll()
	must.Eq(t, []string{"a", "b", "c"}, got)

	// A recovered task's tailer starts at the end: nothing is replayed.
	got = nil
	tl2 := &eventTailer{path: path, interval: time.Hour, logger: hclogNull(), publish: func(ev workerenv.Event) { got = append(got, ev.Kind) }}
	tl2.fromEnd()
	tl2.poll()
	must.SliceEmpty(t, got)
}

func hclogNull() hclog.Logger { return hclog.NewNullLogger() }
