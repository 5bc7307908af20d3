package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/shoenig/test/must"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"
	"golang.org/x/sys/unix"

	"github.com/nomad-train/nomad-train/driver/proto/base"
	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/hclspec"
	"github.com/nomad-train/nomad-train/internal/testtmp"
)

// This file plays the Nomad client: it builds the plugin binary once per
// test binary, launches it the way the agent does (go-plugin, Nomad's
// handshake, gRPC only, unix socket), encodes configs the way the agent
// does (HCL -> hcldec with the plugin's own schema -> cty-msgpack) and
// creates and reads the log FIFOs the way logmon does.

// pluginBin is the built nomad-driver-train, set by TestMain.
var pluginBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

// runTests builds the plugin, then runs the tests with a private TMPDIR
// (testtmp), which also catches what killed plugin processes leave there.
func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nomad-driver-train-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	pluginBin = filepath.Join(dir, PluginName)
	_, file, _, _ := runtime.Caller(0)
	build := exec.Command("go", "build", "-o", pluginBin, "./cmd/nomad-driver-train")
	build.Dir = filepath.Join(filepath.Dir(file), "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build plugin: %v\n%s\n", err, out)
		return 1
	}
	return testtmp.Run(m)
}

// nomadClient is one launched plugin process and its client stubs.
type nomadClient struct {
	client *plugin.Client
	base   base.BasePluginClient
	driver drivers.DriverClient
}

// launchPlugin starts the plugin binary exactly as a Nomad client does.
func launchPlugin(t *testing.T) *nomadClient {
	t.Helper()
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake(),
		Plugins:          PluginSet(nil),
		Cmd:              exec.Command(pluginBin),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: hclogWriter{t}, Level: hclog.Info}),
	})
	t.Cleanup(c.Kill)
	rpc, err := c.Client()
	must.NoError(t, err)
	rawBase, err := rpc.Dispense(PluginSetBase)
	must.NoError(t, err)
	rawDriver, err := rpc.Dispense(PluginSetDriver)
	must.NoError(t, err)
	return &nomadClient{client: c, base: rawBase.(base.BasePluginClient), driver: rawDriver.(drivers.DriverClient)}
}

// hclogWriter sends the plugin's relayed logs to the test log.
type hclogWriter struct{ t *testing.T }

func (w hclogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// configure runs SetConfig with an HCL plugin config body, as the agent's
// long-lived instance does (nomad_config set).
func (n *nomadClient) configure(t *testing.T, body string) {
	t.Helper()
	ctx := testCtx(t)
	schema, err := n.base.ConfigSchema(ctx, &base.ConfigSchemaRequest{})
	must.NoError(t, err)
	_, err = n.base.SetConfig(ctx, &base.SetConfigRequest{
		MsgpackConfig:    nomadEncode(t, schema.GetSpec(), body),
		NomadConfig:      &base.NomadConfig{Driver: &base.NomadDriverConfig{ClientMinPort: 14000, ClientMaxPort: 14512}},
		PluginApiVersion: APIVersion,
	})
	must.NoError(t, err)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// nomadEncode does what the Nomad agent does with a config body: convert
// the plugin's hclspec into an hcldec spec, decode the HCL with it and
// encode the value as cty-msgpack with its own type.
func nomadEncode(t *testing.T, spec *hclspec.Spec, body string) []byte {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(body), "config.hcl", hcl.InitialPos)
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	val, diags := hcldec.Decode(f.Body, toHCLDec(t, spec, ""), nil)
	if diags.HasErrors() {
		t.Fatalf("the Nomad client would reject this config: %s", diags.Error())
	}
	b, err := ctymsgpack.Marshal(val, val.Type())
	must.NoError(t, err)
	return b
}

// toHCLDec converts a schema the way Nomad's hclspecutils does (for the
// spec kinds this driver uses).
func toHCLDec(t *testing.T, s *hclspec.Spec, implied string) hcldec.Spec {
	t.Helper()
	switch b := s.GetBlock().(type) {
	case *hclspec.Spec_Object:
		obj := hcldec.ObjectSpec{}
		for name, child := range b.Object.GetAttributes() {
			obj[name] = toHCLDec(t, child, name)
		}
		return obj
	case *hclspec.Spec_Attr:
		ty, err := parseTypeExpr(b.Attr.GetType())
		must.NoError(t, err)
		name := b.Attr.GetName()
		if name == "" {
			name = implied
		}
		return &hcldec.AttrSpec{Name: name, Type: ty, Required: b.Attr.GetRequired()}
	case *hclspec.Spec_BlockValue:
		name := b.BlockValue.GetName()
		if name == "" {
			name = implied
		}
		return &hcldec.BlockSpec{TypeName: name, Required: b.BlockValue.GetRequired(), Nested: toHCLDec(t, b.BlockValue.GetNested(), "")}
	case *hclspec.Spec_Default:
		// Nomad reads both sides of a Default without an implied name.
		return &hcldec.DefaultSpec{Primary: toHCLDec(t, b.Default.GetPrimary(), ""), Default: toHCLDec(t, b.Default.GetDefault(), "")}
	case *hclspec.Spec_Literal:
		v, err := literalValue(b.Literal.GetValue())
		must.NoError(t, err)
		return &hcldec.LiteralSpec{Value: v}
	default:
		t.Fatalf("spec kind %T not handled by the test client", b)
		return nil
	}
}

// logmon plays Nomad's logmon for one task: it makes the two FIFOs and
// reads them until the writers close.
type logmon struct {
	stdoutPath, stderrPath string
	mu                     sync.Mutex
	stdout, stderr         strings.Builder
	done                   sync.WaitGroup
}

func startLogmon(t *testing.T, logsDir, task string) *logmon {
	t.Helper()
	must.NoError(t, os.MkdirAll(logsDir, 0o755))
	l := &logmon{
		stdoutPath: filepath.Join(logsDir, "."+task+".stdout.fifo"),
		stderrPath: filepath.Join(logsDir, "."+task+".stderr.fifo"),
	}
	for _, p := range []struct {
		path string
		buf  *strings.Builder
	}{{l.stdoutPath, &l.stdout}, {l.stderrPath, &l.stderr}} {
		must.NoError(t, unix.Mkfifo(p.path, 0o600))
		// O_RDWR keeps the FIFO open even between writers, like logmon's
		// reattachable reader; it never blocks on open.
		f, err := os.OpenFile(p.path, os.O_RDWR, 0)
		must.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		l.done.Add(1)
		go func(buf *strings.Builder) {
			defer l.done.Done()
			chunk := make([]byte, 4096)
			for {
				n, err := f.Read(chunk)
				l.mu.Lock()
				buf.Write(chunk[:n])
				l.mu.Unlock()
				if err != nil {
					return
				}
			}
		}(p.buf)
	}
	return l
}

// waitFor polls the logs until both contain want, or fails.
func (l *logmon) waitFor(t *testing.T, stdout, stderr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		ok := strings.Contains(l.stdout.String(), stdout) && strings.Contains(l.stderr.String(), stderr)
		l.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("logs never showed %q / %q; stdout=%q stderr=%q", stdout, stderr, l.stdout.String(), l.stderr.String())
}

// taskFixture is an allocation directory laid out like Nomad's task_dir
// hook leaves it, and the TaskConfig the client would send.
type taskFixture struct {
	allocDir string
	logs     *logmon
	cfg      *drivers.TaskConfig
}

var fixtureSeq struct {
	sync.Mutex
	n int
}

func newTaskFixture(t *testing.T, n *nomadClient, task, configHCL string) *taskFixture {
	t.Helper()
	allocDir := t.TempDir()
	for _, d := range []string{task + "/local", task + "/secrets", task + "/private", task + "/tmp", "alloc/data", "alloc/logs", "alloc/tmp"} {
		must.NoError(t, os.MkdirAll(filepath.Join(allocDir, d), 0o755))
	}
	fixtureSeq.Lock()
	fixtureSeq.n++
	seq := fixtureSeq.n
	fixtureSeq.Unlock()
	allocID := fmt.Sprintf("0000000%d-1111-2222-3333-444444444444", seq)
	schema, err := n.driver.TaskConfigSchema(testCtx(t), &drivers.TaskConfigSchemaRequest{})
	must.NoError(t, err)
	logs := startLogmon(t, filepath.Join(allocDir, "alloc", "logs"), task)
	taskDir := filepath.Join(allocDir, task)
	// What the job's template renders from the run's Variable.
	must.NoError(t, os.WriteFile(filepath.Join(taskDir, "secrets", secretFileName), []byte(fixtureSecret+"\n"), 0o400))
	return &taskFixture{
		allocDir: allocDir,
		logs:     logs,
		cfg: &drivers.TaskConfig{
			Id:                  fmt.Sprintf("%s/%s/%08x", allocID, task, seq),
			Name:                task,
			AllocId:             allocID,
			AllocDir:            allocDir,
			JobName:             "train-job",
			JobId:               "train-job",
			TaskGroupName:       "workers",
			NodeName:            "node-a",
			StdoutPath:          logs.stdoutPath,
			StderrPath:          logs.stderrPath,
			MsgpackDriverConfig: nomadEncode(t, schema.GetSpec(), configHCL),
			Env: map[string]string{
				"PATH":              "/usr/local/bin:/usr/bin:/bin",
				"NOMAD_ALLOC_INDEX": "2",
				"NOMAD_TASK_DIR":    filepath.Join(taskDir, "local"),
				"NOMAD_SECRETS_DIR": filepath.Join(taskDir, "secrets"),
				"NOMAD_ALLOC_DIR":   filepath.Join(allocDir, "alloc"),
				"NOMAD_ADDR_train":  "127.0.0.1:23456",
			},
			Resources: &drivers.Resources{
				AllocatedResources: &drivers.AllocatedTaskResources{
					Cpu:    &drivers.AllocatedCpuResources{CpuShares: 500},
					Memory: &drivers.AllocatedMemoryResources{MemoryMb: 256},
				},
				LinuxResources: &drivers.LinuxResources{CpuShares: 500, MemoryLimitBytes: 256 << 20},
			},
		},
	}
}

// fixtureSecret is the run secret newTaskFixture puts in the secrets dir.
const fixtureSecret = "0123456789abcdef0123456789abcdef"

// shTask is a task config running a shell script directly (not under the
// builtin "external": these tests are about the process, not training).
func shTask(script string) string {
	return fmt.Sprintf(`
command      = "/bin/sh"
args         = ["-c", %q]
launcher     = "direct"
run_name     = "wire"
world_size   = 1
storage_path = "/tmp/nomad-train-test-results"
`, script)
}

func (n *nomadClient) start(t *testing.T, f *taskFixture) *drivers.TaskHandle {
	t.Helper()
	resp, err := n.driver.StartTask(testCtx(t), &drivers.StartTaskRequest{Task: f.cfg})
	must.NoError(t, err)
	h := resp.GetHandle()
	must.NotNil(t, h)
	must.Eq(t, drivers.TaskState_RUNNING, h.GetState())
	must.Positive(t, h.GetVersion())
	must.Eq(t, f.cfg.GetId(), h.GetConfig().GetId())
	t.Cleanup(func() {
		if t.Failed() { // a passing test destroyed its task; its pids may be reused
			killLeftovers(h)
		}
	})
	return h
}

// killLeftovers SIGKILLs a task's process group and shim if a failed test
// left them running (the plugin that started them may be gone).
func killLeftovers(h *drivers.TaskHandle) {
	st, _, err := decodeState(h)
	if err != nil {
		return
	}
	var p struct{ PID, ShimPID int }
	if json.Unmarshal(st.Process, &p) != nil {
		return
	}
	if p.PID > 0 {
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	}
	if p.ShimPID > 0 {
		_ = syscall.Kill(p.ShimPID, syscall.SIGKILL)
	}
}

func (n *nomadClient) wait(t *testing.T, id string) *drivers.WaitTaskResponse {
	t.Helper()
	resp, err := n.driver.WaitTask(testCtx(t), &drivers.WaitTaskRequest{TaskId: id})
	must.NoError(t, err)
	must.NotNil(t, resp.GetResult())
	return resp
}

func (n *nomadClient) destroy(t *testing.T, id string) {
	t.Helper()
	_, err := n.driver.DestroyTask(testCtx(t), &drivers.DestroyTaskRequest{TaskId: id, Force: true})
	must.NoError(t, err)
}

// killPlugin SIGKILLs the plugin process, as a crashing agent would leave it.
func (n *nomadClient) killPlugin(t *testing.T) {
	t.Helper()
	rc := n.client.ReattachConfig()
	must.NotNil(t, rc)
	must.NoError(t, syscall.Kill(rc.Pid, syscall.SIGKILL))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !n.client.Exited() {
		time.Sleep(10 * time.Millisecond)
	}
	must.True(t, n.client.Exited())
}
