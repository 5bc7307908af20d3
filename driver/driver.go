package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nomad-train/nomad-train/driver/proto/base"
	"github.com/nomad-train/nomad-train/driver/proto/drivers"
)

// Options configure a Driver. Zero values pick production defaults where
// one exists.
type Options struct {
	// Logger receives the driver's logs (default: discard).
	Logger hclog.Logger
	// Runner starts and recovers task processes (required).
	Runner Runner
	// NVML is the GPU library; nil means none (CPU only).
	NVML NVML
	// SelfPath is the driver binary, run with workerenv.WorkerArg for
	// builtin entrypoints (default: os.Executable()).
	SelfPath string
	// Version is reported as plugin_version (default PluginVersion).
	Version string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// EventPoll is how often events files are read (default 500ms).
	EventPoll time.Duration
	// CheckpointEventEvery is the least time between two checkpoint task
	// events of one task (default DefaultCheckpointEventEvery); lifecycle
	// events always pass.
	CheckpointEventEvery time.Duration
	// HostName names the node when Nomad does not (default os.Hostname).
	HostName string
}

// Driver is the "train" task driver. It serves the BasePlugin and Driver
// gRPC services; PluginSet and Serve put it on go-plugin.
type Driver struct {
	base.UnimplementedBasePluginServer
	drivers.UnimplementedDriverServer

	// Immutable after New.
	logger    hclog.Logger
	runner    Runner
	gpus      *gpuProbe
	selfPath  string
	version   string
	now       func() time.Time
	eventPoll time.Duration
	ckptEvery time.Duration
	hostName  string
	events    *eventHub
	// ctx lives as long as the Driver; background goroutines end with it.
	ctx    context.Context
	cancel context.CancelFunc

	mu sync.RWMutex
	// Guarded by mu.
	config    PluginConfig
	configGen chan struct{} // closed and replaced when config changes
	tasks     map[string]*taskHandle
}

// New returns a Driver with the default plugin config until SetConfig.
func New(o Options) (*Driver, error) {
	if o.Runner == nil {
		return nil, errors.New("driver needs a Runner")
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.SelfPath == "" {
		p, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
		o.SelfPath = p
	}
	if o.Version == "" {
		o.Version = PluginVersion
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.EventPoll <= 0 {
		o.EventPoll = 500 * time.Millisecond
	}
	if o.CheckpointEventEvery <= 0 {
		o.CheckpointEventEvery = DefaultCheckpointEventEvery
	}
	if o.HostName == "" {
		o.HostName, _ = os.Hostname()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Driver{
		logger:    o.Logger.Named(PluginName),
		runner:    o.Runner,
		gpus:      &gpuProbe{lib: o.NVML},
		selfPath:  o.SelfPath,
		version:   o.Version,
		now:       o.Now,
		eventPoll: o.EventPoll,
		ckptEvery: o.CheckpointEventEvery,
		hostName:  o.HostName,
		events:    newEventHub(o.Logger.Named(PluginName)),
		ctx:       ctx,
		cancel:    cancel,
		config:    DefaultPluginConfig(),
		configGen: make(chan struct{}),
		tasks:     map[string]*taskHandle{},
	}, nil
}

// Close stops the driver's background work. Tasks keep running: they are
// recovered by the next plugin process.
func (d *Driver) Close() {
	d.cancel()
	d.gpus.close()
}

func (d *Driver) setConfig(cfg PluginConfig, _ *base.NomadConfig) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.config = cfg
	close(d.configGen)
	d.configGen = make(chan struct{})
}

// currentConfig returns the plugin config and a channel closed when it
// changes.
func (d *Driver) currentConfig() (PluginConfig, <-chan struct{}) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.config, d.configGen
}

func (d *Driver) task(id string) (*taskHandle, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	h, ok := d.tasks[id]
	if !ok {
		return nil, errUnknownTask(id)
	}
	return h, nil
}

// Init implements the Driver service (Nomad v2.0.4+); nothing to do.
func (d *Driver) Init(context.Context, *drivers.InitRequest) (*drivers.InitResponse, error) {
	return &drivers.InitResponse{}, nil
}

// Shutdown implements the Driver service. Tasks are left running.
func (d *Driver) Shutdown(context.Context, *drivers.ShutdownRequest) (*drivers.ShutdownResponse, error) {
	return &drivers.ShutdownResponse{}, nil
}

// TaskConfigSchema implements the Driver service.
func (d *Driver) TaskConfigSchema(context.Context, *drivers.TaskConfigSchemaRequest) (*drivers.TaskConfigSchemaResponse, error) {
	return &drivers.TaskConfigSchemaResponse{Spec: TaskConfigSpec()}, nil
}

// Capabilities implements the Driver service: signals and exec, no
// filesystem or network isolation (tasks see host paths). Mounts are
// taken, so that Nomad gives the driver a task's host and CSI volumes
// (with NO_MOUNTS a client refuses both); without isolation they are
// honoured as mounts.go says.
func (d *Driver) Capabilities(context.Context, *drivers.CapabilitiesRequest) (*drivers.CapabilitiesResponse, error) {
	return &drivers.CapabilitiesResponse{Capabilities: &drivers.DriverCapabilities{
		SendSignals:           true,
		Exec:                  true,
		FsIsolation:           drivers.DriverCapabilities_NONE,
		NetworkIsolationModes: []drivers.NetworkIsolationSpec_NetworkIsolationMode{drivers.NetworkIsolationSpec_HOST},
		MountConfigs:          drivers.DriverCapabilities_ANY_MOUNTS,
	}}, nil
}

// Fingerprint implements the Driver service.
func (d *Driver) Fingerprint(_ *drivers.FingerprintRequest, stream drivers.Driver_FingerprintServer) error {
	ctx, cancel := mergeCtx(stream.Context(), d.ctx)
	defer cancel()
	return d.fingerprintLoop(ctx, stream.Send)
}

// RecoverTask implements the Driver service: reattach to a task from its
// persisted handle after the plugin or agent restarted.
func (d *Driver) RecoverTask(ctx context.Context, req *drivers.RecoverTaskRequest) (*drivers.RecoverTaskResponse, error) {
	h := req.GetHandle()
	id := h.GetConfig().GetId()
	if id == "" {
		id = req.GetTaskId()
	}
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "handle has no task id")
	}
	if _, err := d.task(id); err == nil {
		return &drivers.RecoverTaskResponse{}, nil
	}
	st, tc, err := decodeState(h)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "recover task %q: %v", id, err)
	}
	proc, err := d.runner.Recover(ctx, st.Process)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "recover task %q: %v", id, err)
	}
	d.track(tc, st.Config, proc, st.EventsPath, true)
	d.logger.Info("task recovered", "task_id", id, "pid", proc.PID())
	return &drivers.RecoverTaskResponse{}, nil
}

// WaitTask implements the Driver service: block until the task exits or
// the call is cancelled.
func (d *Driver) WaitTask(ctx context.Context, req *drivers.WaitTaskRequest) (*drivers.WaitTaskResponse, error) {
	h, err := d.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-d.ctx.Done():
		return nil, status.Error(codes.Unavailable, "driver is shutting down")
	case <-h.done:
	}
	e := h.exitStatus()
	return &drivers.WaitTaskResponse{Result: exitResult(*e), Err: e.Err}, nil
}

func exitResult(e ExitStatus) *drivers.ExitResult {
	return &drivers.ExitResult{ExitCode: int32(e.ExitCode), Signal: int32(e.Signal), OomKilled: e.OOMKilled}
}

// StopTask implements the Driver service: signal, wait up to the timeout,
// then kill the process group.
func (d *Driver) StopTask(ctx context.Context, req *drivers.StopTaskRequest) (*drivers.StopTaskResponse, error) {
	h, err := d.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	sig := syscall.SIGINT // what Nomad's own executor sends when the job names none
	if req.GetSignal() != "" {
		if sig, err = parseSignal(req.GetSignal()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	grace := req.GetTimeout().AsDuration()
	if !h.running() {
		return &drivers.StopTaskResponse{}, nil
	}
	if err := h.proc.Stop(ctx, sig, grace); err != nil {
		return nil, status.Errorf(codes.Internal, "stop task: %v", err)
	}
	return &drivers.StopTaskResponse{}, nil
}

// DestroyTask implements the Driver service. Unknown ids succeed: the
// client calls it after a failed recovery too.
func (d *Driver) DestroyTask(ctx context.Context, req *drivers.DestroyTaskRequest) (*drivers.DestroyTaskResponse, error) {
	h, err := d.task(req.GetTaskId())
	if err != nil {
		return &drivers.DestroyTaskResponse{}, nil
	}
	if h.running() && !req.GetForce() {
		return nil, status.Error(codes.FailedPrecondition, "task is still running; stop it or destroy with force")
	}
	if err := h.proc.Destroy(ctx, req.GetForce()); err != nil {
		return nil, status.Errorf(codes.Internal, "destroy task: %v", err)
	}
	d.mu.Lock()
	delete(d.tasks, h.id)
	d.mu.Unlock()
	h.cancel()
	return &drivers.DestroyTaskResponse{}, nil
}

// InspectTask implements the Driver service.
func (d *Driver) InspectTask(_ context.Context, req *drivers.InspectTaskRequest) (*drivers.InspectTaskResponse, error) {
	h, err := d.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	state, completed, exit := h.status()
	res := &drivers.ExitResult{}
	if exit != nil {
		res = exitResult(*exit)
	}
	return &drivers.InspectTaskResponse{
		Task: &drivers.TaskStatus{
			Id:          h.id,
			Name:        h.taskCfg.GetName(),
			State:       state,
			StartedAt:   timestamppb.New(h.startedAt),
			CompletedAt: timestamppb.New(completed),
			Result:      res,
		},
		Driver: &drivers.TaskDriverStatus{Attributes: map[string]string{
			"pid":      fmt.Sprint(h.proc.PID()),
			"run_name": h.config.RunName,
		}},
	}, nil
}

// TaskStats implements the Driver service.
func (d *Driver) TaskStats(req *drivers.TaskStatsRequest, stream drivers.Driver_TaskStatsServer) error {
	h, err := d.task(req.GetTaskId())
	if err != nil {
		return err
	}
	cfg, _ := d.currentConfig()
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = cfg.StatsInterval
	}
	ctx, cancel := mergeCtx(stream.Context(), d.ctx)
	defer cancel()
	return d.statsLoop(ctx, h, interval, cfg.GPUStats, stream.Send)
}

// TaskEvents implements the Driver service: one stream for all tasks.
func (d *Driver) TaskEvents(_ *drivers.TaskEventsRequest, stream drivers.Driver_TaskEventsServer) error {
	ch, unsubscribe := d.events.subscribe()
	defer unsubscribe()
	ctx, cancel := mergeCtx(stream.Context(), d.ctx)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// SignalTask implements the Driver service.
func (d *Driver) SignalTask(_ context.Context, req *drivers.SignalTaskRequest) (*drivers.SignalTaskResponse, error) {
	h, err := d.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	sig, err := parseSignal(req.GetSignal())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := h.proc.Signal(sig); err != nil {
		return nil, status.Errorf(codes.Internal, "signal task: %v", err)
	}
	return &drivers.SignalTaskResponse{}, nil
}

// parseSignal reads "SIGHUP", "HUP" or a number.
func parseSignal(s string) (syscall.Signal, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}
