package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nomad-train/nomad-train/driver/executor"
	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Starting a task: its config checked, its process decided and started,
// and its handle tracked.

// taskUser is the user the task asks for, else the plugin's default_user
// ("": the agent's own user).
func taskUser(tc *drivers.TaskConfig, pcfg PluginConfig) string {
	if u := tc.GetUser(); u != "" {
		return u
	}
	return pcfg.DefaultUser
}

// taskUID is the uid the task runs as: its user, else the plugin's
// default_user, else the agent's own user. -1 when the user is not known
// (processSpec then refuses the task).
func taskUID(tc *drivers.TaskConfig, pcfg PluginConfig) int {
	name := taskUser(tc, pcfg)
	if name == "" {
		return os.Getuid()
	}
	u, err := executor.LookupUser(name)
	if err != nil {
		return -1
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return -1
	}
	return uid
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
	// at a run of the same name (another secret) does not count. On an
	// object store the mark is read with the keys the task itself gets
	// (from its Variable, or the client's environment that Nomad passes
	// on), never with what only root reaches (its shared AWS files): a job
	// chooses the bucket and the endpoint. A task given no keys is left to
	// its worker, which finds the mark and exits at once. In a directory
	// the mark counts only when the task's user owns it, as the marks its
	// workers write are: the plugin reads it as root, at a path the job
	// chose.
	paths := pathsOf(tc)
	mounts, err := taskMounts(tc, paths.TaskDir)
	if err != nil {
		return nil, startError(false, codes.InvalidArgument, err)
	}
	if cfg, err = mountStorage(cfg, mounts, paths.TaskDir); err != nil {
		return nil, startError(false, codes.InvalidArgument, err)
	}
	root := storage.Rebase(cfg.StoragePath, paths.TaskDir)
	attempt := storage.AttemptID(readSecret(filepath.Join(paths.SecretsDir, secretFileName)))
	if f, failed, err := storage.FailedForGood(root, cfg.RunName, attempt, storage.WithStorageOptions(cfg.Storage),
		storage.WithTaskEnviron(taskEnviron(tc)), storage.WithMarkOwner(taskUID(tc, pcfg))); err == nil && failed {
		return nil, startError(false, codes.FailedPrecondition, fmt.Errorf(
			"run %q failed for good: %s; remove %s to run it again",
			cfg.RunName, f.Reason, storage.FailedLocation(root, cfg.RunName)))
	}
	spec, eventsPath, err := d.processSpec(tc, cfg, pcfg, mounts)
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
	d.mu.RLock()
	pcfg := d.config
	d.mu.RUnlock()
	uid := taskUID(tc, pcfg)
	tail := &eventTailer{
		path:       eventsPath,
		owner:      uid,
		ownerKnown: uid >= 0,
		interval:   d.eventPoll,
		logger:     logger,
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
// environment, user, directories and resources. cfg's storage path is
// already rebased onto mounts (mountStorage).
func (d *Driver) processSpec(tc *drivers.TaskConfig, cfg TaskConfig, pcfg PluginConfig, mounts []workerenv.Mount) (ProcessSpec, string, error) {
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
		Mounts:      mounts,
	}
	if !in.SecretFound && !pcfg.AllowUnauthenticated {
		return ProcessSpec{}, "", noSecretError(tc, secretPath)
	}
	if err := checkTaskEnv(tc.GetEnv(), os.LookupEnv); err != nil {
		return ProcessSpec{}, "", err
	}
	if err := checkTaskSettings(tc.GetEnv()); err != nil {
		return ProcessSpec{}, "", err
	}
	user := taskUser(tc, pcfg)
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
