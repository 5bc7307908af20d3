package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nomad-train/nomad-train/driver/executor"
	"github.com/nomad-train/nomad-train/driver/proto/base"
	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
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
// filesystem or network isolation (tasks see host paths), no mounts.
func (d *Driver) Capabilities(context.Context, *drivers.CapabilitiesRequest) (*drivers.CapabilitiesResponse, error) {
	return &drivers.CapabilitiesResponse{Capabilities: &drivers.DriverCapabilities{
		SendSignals:           true,
		Exec:                  true,
		FsIsolation:           drivers.DriverCapabilities_NONE,
		NetworkIsolationModes: []drivers.NetworkIsolationSpec_NetworkIsolationMode{drivers.NetworkIsolationSpec_HOST},
		MountConfigs:          drivers.DriverCapabilities_NO_MOUNTS,
	}}, nil
}

// Fingerprint implements the Driver service.
func (d *Driver) Fingerprint(_ *drivers.FingerprintRequest, stream drivers.Driver_FingerprintServer) error {
	ctx, cancel := mergeCtx(stream.Context(), d.ctx)
	defer cancel()
	return d.fingerprintLoop(ctx, stream.Send)
}

// StartTask implements the Driver service.
func (d *Driver) StartTask(ctx context.Context, req *drivers.StartTaskRequest) (*drivers.StartTaskResponse, error) {
	tc := req.GetTask()
	if tc.GetId() == "" {
		return nil, startError(false, codes.InvalidArgument, errors.New("task config has no id"))
	}
	d.mu.RLock()
	_, exists := d.tasks[tc.GetId()]
	pcfg := d.config
	d.mu.RUnlock()
	if exists {
		return nil, startError(false, codes.AlreadyExists, fmt.Errorf("task %q is already started", tc.GetId()))
	}
	cfg, err := DecodeTaskConfig(tc.GetMsgpackDriverConfig())
	if err != nil {
		return nil, startError(false, codes.InvalidArgument, err)
	}
	// A run that failed for good (its training function failed, or its
	// failure budget is spent) cannot be helped by a restart: refuse it as
	// unrecoverable, so Nomad stops restarting it. Nomad still reschedules
	// the allocation (within the group's reschedule policy); the new one is
	// refused here when it sees the mark on shared storage, and otherwise
	// its worker finds the failure in the rendezvous store and exits at
	// once. A relative storage path is the worker's, so it is read from the
	// task's directory, not the plugin's; a mark left by an earlier attempt
	// at a run of the same name (another secret) does not count.
	paths := pathsOf(tc)
	root := storage.Rebase(cfg.StoragePath, paths.TaskDir)
	attempt := storage.AttemptID(readSecret(filepath.Join(paths.SecretsDir, secretFileName)))
	if f, failed, err := storage.FailedForGood(root, cfg.RunName, attempt); err == nil && failed {
		return nil, startError(false, codes.FailedPrecondition, fmt.Errorf(
			"run %q failed for good: %s; remove %s to run it again",
			cfg.RunName, f.Reason, filepath.Join(root, cfg.RunName, storage.FailedFile)))
	}
	spec, eventsPath, err := d.processSpec(tc, cfg, pcfg)
	if err != nil {
		return nil, startError(false, codes.InvalidArgument, err)
	}
	proc, err := d.runner.Start(ctx, spec)
	if err != nil {
		// Only the Runner knows whether retrying can help (a transient
		// fork or FIFO failure) or not (a bad user, a missing program).
		return nil, startError(IsRetryable(err), codes.Internal, fmt.Errorf("start task: %w", err))
	}
	procState, err := proc.SaveState()
	if err != nil {
		_ = proc.Destroy(context.WithoutCancel(ctx), true)
		return nil, startError(true, codes.Internal, fmt.Errorf("save process state: %w", err))
	}
	driverState, err := encodeState(tc, cfg, procState, proc.StartedAt(), eventsPath)
	if err != nil {
		_ = proc.Destroy(context.WithoutCancel(ctx), true)
		return nil, startError(true, codes.Internal, err)
	}
	d.track(tc, cfg, proc, eventsPath, false)
	d.logger.Info("task started", "task_id", tc.GetId(), "pid", proc.PID(), "command", spec.Command)
	return &drivers.StartTaskResponse{
		Result: drivers.StartTaskResponse_SUCCESS,
		Handle: &drivers.TaskHandle{
			Version:     stateVersion,
			Config:      tc,
			State:       drivers.TaskState_RUNNING,
			DriverState: driverState,
		},
	}, nil
}

// track registers a started or recovered process and starts its watcher
// and events tailer.
func (d *Driver) track(tc *drivers.TaskConfig, cfg TaskConfig, proc Process, eventsPath string, recovered bool) *taskHandle {
	logger := d.logger.With("task_id", tc.GetId())
	h := newTaskHandle(tc.GetId(), tc, cfg, proc, proc.StartedAt(), logger)
	ctx, cancel := context.WithCancel(d.ctx)
	h.cancel = cancel
	d.mu.Lock()
	d.tasks[h.id] = h
	d.mu.Unlock()
	go h.watch(ctx, d.now)
	tail := &eventTailer{
		path:     eventsPath,
		interval: d.eventPoll,
		logger:   logger,
		publish: func(ev workerenv.Event) {
			d.events.publish(toDriverEvent(tc, ev, d.now()))
		},
		coalesce: newEventCoalescer(d.ckptEvery),
		now:      d.now,
	}
	if recovered {
		tail.fromEnd()
	}
	go tail.run(ctx, h.done)
	return h
}

// processSpec works out what to run for a task: program, arguments,
// environment, user, directories and resources.
func (d *Driver) processSpec(tc *drivers.TaskConfig, cfg TaskConfig, pcfg PluginConfig) (ProcessSpec, string, error) {
	paths := pathsOf(tc)
	if tc.GetAllocDir() == "" || tc.GetName() == "" {
		return ProcessSpec{}, "", errors.New("task config has no alloc_dir or name")
	}
	if err := os.MkdirAll(paths.LocalDir, 0o755); err != nil {
		return ProcessSpec{}, "", fmt.Errorf("create task local dir: %w", err)
	}
	secretPath := filepath.Join(paths.SecretsDir, secretFileName)
	in := envInput{
		Task:        tc,
		Config:      cfg,
		Plugin:      pcfg,
		Paths:       paths,
		SecretFound: hasSecret(secretPath),
		HostName:    d.hostName,
	}
	if !in.SecretFound && !pcfg.AllowUnauthenticated {
		return ProcessSpec{}, "", noSecretError(tc, secretPath)
	}
	if err := checkTaskEnv(tc.GetEnv()); err != nil {
		return ProcessSpec{}, "", err
	}
	user := tc.GetUser()
	if user == "" {
		user = pcfg.DefaultUser
	}
	if err := checkUser(user, pcfg.DeniedUsers, executor.LookupUser); err != nil {
		return ProcessSpec{}, "", err
	}
	if pcfg.GPUStats {
		in.NodeHasGPUs = len(d.gpus.report().Devices) > 0
	}
	// How to start the worker is workerenv's decision, as for a local
	// run; the driver's part is to resolve and check the command first.
	ep := workerenv.Entrypoint{Builtin: cfg.Builtin, Args: cfg.Args, Launcher: cfg.Launcher}
	var argv0 string
	if cfg.Builtin == "" {
		prog, err := resolveCommand(cfg.Command, paths.TaskDir, tc.GetEnv()["PATH"], pcfg.AllowedCommandDirs)
		if err != nil {
			return ProcessSpec{}, "", err
		}
		ep.Command, argv0 = prog.Path, prog.Name
	}
	proc, err := workerenv.StartFor(ep, d.selfPath, workerenv.SpeaksContract)
	if err != nil {
		return ProcessSpec{}, "", fieldErr("builtin", "%v", err)
	}
	if proc.Self {
		argv0 = ""
	}
	in.Process = proc
	env := workerEnv(in)
	if proc.Self {
		if held := withheldIn(tc); len(held) > 0 {
			d.logger.Info("job env withheld from the driver binary", "task_id", tc.GetId(), "variables", held, "to_command", proc.External != nil)
		}
	}
	command, args := proc.Path, proc.Args
	spec := ProcessSpec{
		TaskID:     tc.GetId(),
		Command:    command,
		Argv0:      argv0,
		Args:       args,
		Env:        env,
		Dir:        paths.TaskDir,
		User:       user,
		StdoutPath: tc.GetStdoutPath(),
		StderrPath: tc.GetStderrPath(),
		StateDir:   filepath.Join(paths.PrivateDir, "train-"+sanitizeID(tc.GetId())),
	}
	if r := tc.GetResources(); r != nil {
		spec.CgroupPath = r.GetLinuxResources().GetCpusetCgroup()
		spec.CPUShares = r.GetAllocatedResources().GetCpu().GetCpuShares()
		spec.MemoryMB = r.GetAllocatedResources().GetMemory().GetMemoryMb()
		spec.MemoryMaxMB = r.GetAllocatedResources().GetMemory().GetMemoryMaxMb()
	}
	if spec.StdoutPath == "" {
		spec.StdoutPath = os.DevNull
	}
	if spec.StderrPath == "" {
		spec.StderrPath = os.DevNull
	}
	return spec, filepath.Join(paths.LocalDir, eventsFileName), nil
}

// ErrNoSecret is wrapped when a task's secrets dir holds no run secret and
// the plugin config does not allow unauthenticated workers.
var ErrNoSecret = errors.New("no run secret")

// hasSecret reports whether the run secret file exists and is not blank
// (a template over a Variable without the item renders an empty file).
func hasSecret(path string) bool { return len(readSecret(path)) > 0 }

// maxSecretSize bounds what the plugin reads of a run secret (64 hex
// digits in practice).
const maxSecretSize = 64 << 10

// readSecret is the run secret at path, as the worker reads it (trimmed),
// or nil. The task can write its secrets dir, and the plugin reads it as
// root: only a regular file counts, not a symlink (to /dev/zero, or to a
// file only root may read), a FIFO (which would block StartTask) or a
// file larger than maxSecretSize.
func readSecret(path string) []byte {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretSize+1))
	if err != nil || len(b) > maxSecretSize {
		return nil
	}
	return bytes.TrimSpace(b)
}

// noSecretError explains how to give a job its run secret.
func noSecretError(tc *drivers.TaskConfig, path string) error {
	job := tc.GetParentJobId()
	if job == "" {
		job = tc.GetJobId()
	}
	if job == "" {
		job = "<job>"
	}
	return fmt.Errorf("%w: %s is missing, empty or not a regular file, so the workers could not authenticate to each other. "+
		"Submit with nomad-train run -address, or give the task the template nomad-train compile emits "+
		"and store the secret first: nomad var put nomad/jobs/%s secret=<64 hex digits>. "+
		"To run workers without authentication on this node, set allow_unauthenticated = true in the plugin config",
		ErrNoSecret, path, job)
}

func sanitizeID(id string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r == ' ' {
			return '-'
		}
		return r
	}, id)
}

// startError is a StartTask error as Nomad reads it: recoverable ones
// carry a RecoverableError detail with code FailedPrecondition.
func startError(recoverable bool, code codes.Code, err error) error {
	if recoverable {
		code = codes.FailedPrecondition
	}
	st := status.New(code, err.Error())
	if ds, derr := st.WithDetails(&structs.RecoverableError{Recoverable: recoverable}); derr == nil {
		st = ds
	}
	return st.Err()
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

// ExecTask implements the Driver service.
func (d *Driver) ExecTask(ctx context.Context, req *drivers.ExecTaskRequest) (*drivers.ExecTaskResponse, error) {
	h, err := d.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if len(req.GetCommand()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "exec needs a command")
	}
	stdout, stderr, code, err := h.proc.Exec(ctx, req.GetCommand(), req.GetTimeout().AsDuration())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "exec in task: %v", err)
	}
	return &drivers.ExecTaskResponse{Stdout: stdout, Stderr: stderr, Result: &drivers.ExitResult{ExitCode: int32(code)}}, nil
}

// ExecTaskStreaming implements the Driver service (nomad alloc exec).
func (d *Driver) ExecTaskStreaming(stream drivers.Driver_ExecTaskStreamingServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	setup := first.GetSetup()
	if setup == nil {
		return status.Error(codes.InvalidArgument, "first exec message must carry setup")
	}
	h, err := d.task(setup.GetTaskId())
	if err != nil {
		return err
	}
	if len(setup.GetCommand()) == 0 {
		return status.Error(codes.InvalidArgument, "exec needs a command")
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()

	stdinR, stdinW := io.Pipe()
	resize := make(chan TermSize, 4)
	go func() {
		defer stdinW.Close()
		pump := func(m *drivers.ExecTaskStreamingRequest) bool {
			if sz := m.GetTtySize(); sz != nil {
				select {
				case resize <- TermSize{Height: int(sz.GetHeight()), Width: int(sz.GetWidth())}:
				case <-ctx.Done():
					return false
				}
			}
			if in := m.GetStdin(); in != nil {
				if len(in.GetData()) > 0 {
					if _, err := stdinW.Write(in.GetData()); err != nil {
						return false
					}
				}
				if in.GetClose() {
					return false
				}
			}
			return true
		}
		if !pump(first) {
			return
		}
		for {
			m, err := stream.Recv()
			if err != nil || !pump(m) {
				return
			}
		}
	}()

	var sendMu sync.Mutex
	send := func(r *drivers.ExecTaskStreamingResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(r)
	}
	stdout := &streamWriter{send: send, stderr: false}
	stderr := &streamWriter{send: send, stderr: true}
	code, err := h.proc.ExecStreaming(ctx, setup.GetCommand(), setup.GetTty(), stdinR, stdout, stderr, resize)
	stdinR.Close()
	if err != nil {
		return status.Errorf(codes.Internal, "exec in task: %v", err)
	}
	return send(&drivers.ExecTaskStreamingResponse{Exited: true, Result: &drivers.ExitResult{ExitCode: int32(code)}})
}

// streamWriter sends what is written as exec output messages.
type streamWriter struct {
	send   func(*drivers.ExecTaskStreamingResponse) error
	stderr bool
}

func (w *streamWriter) Write(p []byte) (int, error) {
	op := &drivers.ExecTaskStreamingIOOperation{Data: append([]byte(nil), p...)}
	r := &drivers.ExecTaskStreamingResponse{Stdout: op}
	if w.stderr {
		r = &drivers.ExecTaskStreamingResponse{Stderr: op}
	}
	if err := w.send(r); err != nil {
		return 0, err
	}
	return len(p), nil
}

// mergeCtx is a context that ends when either a or b ends.
func mergeCtx(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return ctx, func() { stop(); cancel() }
}
