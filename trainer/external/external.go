package external

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nomad-train/nomad-train/python"
	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/collective"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Environment of the wrapper and of the command it runs.
const (
	// RequestFDEnv is the file descriptor the command writes requests to,
	// one JSON object per line (see Request).
	RequestFDEnv = "NOMAD_TRAIN_REQUEST_FD"
	// ReplyFDEnv is the file descriptor the command reads one Reply line
	// from after each request.
	ReplyFDEnv = "NOMAD_TRAIN_REPLY_FD"
	// LatestCheckpointEnv is the directory of the run's latest committed
	// checkpoint, empty when there is none: what to resume from.
	LatestCheckpointEnv = "NOMAD_TRAIN_LATEST_CHECKPOINT"
	// HeldEnv holds, as a JSON object, variables of the job's environment
	// that the launcher kept from the wrapper process (the loader's
	// LD_PRELOAD, LD_LIBRARY_PATH, ...: the wrapper is the launcher's own
	// binary) and that belong to the command: the wrapper gives them to it.
	HeldEnv = "NOMAD_TRAIN_EXTERNAL_HELD_ENV"
)

// Request is one line the command writes to RequestFDEnv.
type Request struct {
	// Op is "report" (record Metrics and, when Checkpoint is a directory,
	// commit its files as a checkpoint: collective, every rank reports in
	// step), "checkpoint_dir" (get a fresh directory on the run's storage
	// to write a checkpoint into) or "should_checkpoint" (whether any
	// worker of the gang was asked to stop, as Session.ShouldCheckpoint:
	// collective; the answer is Reply.Stop, the same on every rank).
	Op         string         `json:"op"`
	Metrics    map[string]any `json:"metrics,omitempty"`
	Checkpoint string         `json:"checkpoint,omitempty"`
}

// Reply answers one Request.
type Reply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Path is the new directory (checkpoint_dir) or the committed
	// checkpoint (report with a checkpoint).
	Path string `json:"path,omitempty"`
	// Stop answers should_checkpoint: checkpoint (report one) and exit 0.
	Stop bool `json:"stop,omitempty"`
}

// ErrCommandFailed is wrapped when the command exits unsuccessfully. It
// also wraps collective.ErrPeerLost: as with torchrun, a failed worker
// process fails the worker group, which restarts in the next rendezvous
// generation from the latest checkpoint while the failure budget lasts.
var ErrCommandFailed = errors.New("worker command failed")

// Train is the training function of the builtin "external": it runs the
// command named by workerenv.ExternalCommand.
func Train(ctx context.Context, s *trainer.Session) error {
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv(workerenv.ExternalCommand)), &argv); err != nil || len(argv) == 0 {
		return fmt.Errorf("%s must be a non-empty JSON array of strings: %q", workerenv.ExternalCommand, os.Getenv(workerenv.ExternalCommand))
	}
	return Runner{Argv: argv}.Train(ctx, s)
}

// Runner runs one non-Go worker command per rendezvous generation.
type Runner struct {
	Argv []string
	// Stdout and Stderr receive the command's output (default: this
	// process's).
	Stdout, Stderr io.Writer
	// StopGrace is how long the command has between SIGTERM and SIGKILL
	// when the generation breaks (default 5s).
	StopGrace time.Duration
}

// commandEnv is the command's environment: the wrapper's own, without
// HeldEnv, plus the variables HeldEnv holds, then extra (which wins).
func commandEnv(environ []string, extra ...string) ([]string, error) {
	env := make([]string, 0, len(environ)+len(extra))
	var held map[string]string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if k != HeldEnv {
			env = append(env, kv)
			continue
		}
		if err := json.Unmarshal([]byte(v), &held); err != nil {
			return nil, fmt.Errorf("%s is not a JSON object of strings: %w", HeldEnv, err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(held)) {
		env = append(env, k+"="+held[k])
	}
	return append(env, extra...), nil
}

// hostInfo is what each rank tells the others before starting its command.
type hostInfo struct {
	Addr string `json:"addr,omitempty"` // rank 0: host:port of the torch store
	Node int    `json:"node"`
}

// topology agrees on the master address (rank 0's host, and the port Nomad
// gave its task, or one free there) and counts the nodes.
func topology(ctx context.Context, s *trainer.Session, env workerenv.Env) (workerenv.Topology, error) {
	mine := hostInfo{Node: s.NodeRank()}
	if s.WorldRank() == 0 {
		host, _, err := net.SplitHostPort(env.Addr)
		if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		port := env.TorchPort // the port Nomad gave the task
		if port == 0 {
			var err error
			if port, err = FreePort(); err != nil {
				return workerenv.Topology{}, err
			}
		}
		mine.Addr = net.JoinHostPort(host, strconv.Itoa(port))
	}
	b, err := json.Marshal(mine)
	if err != nil {
		return workerenv.Topology{}, err
	}
	all, err := s.AllGather(ctx, b)
	if err != nil {
		return workerenv.Topology{}, fmt.Errorf("share torch master address: %w", err)
	}
	var t workerenv.Topology
	for r, raw := range all {
		var h hostInfo
		if err := json.Unmarshal(raw, &h); err != nil {
			return workerenv.Topology{}, fmt.Errorf("decode rank %d host info: %w", r, err)
		}
		t.GroupWorldSize = max(t.GroupWorldSize, h.Node+1)
		if r == 0 {
			host, port, err := net.SplitHostPort(h.Addr)
			if err != nil {
				return workerenv.Topology{}, fmt.Errorf("rank 0 master address %q: %w", h.Addr, err)
			}
			t.MasterAddr = host
			t.MasterPort, _ = strconv.Atoi(port)
		}
	}
	t.Rank, t.WorldSize = s.WorldRank(), s.WorldSize()
	t.LocalRank, t.LocalWorldSize = s.LocalRank(), s.LocalWorldSize()
	t.GroupRank = s.NodeRank()
	t.RestartCount = int(s.Generation()) - 1
	t.MaxRestarts = env.MaxFailures
	t.RunID = env.RunName
	return t, nil
}

// The torch store's port is drawn from [torchPortLow, torchPortHigh):
// below Linux's ephemeral range (32768 and up by default) and Nomad's
// dynamic ports (20000-32000 by default). The command binds it a second
// or more after it was found free (Python imports torch first), and a port
// the kernel hands out as ephemeral can be taken meanwhile by any outgoing
// connection on the machine; one from this range only by a listener.
const (
	torchPortLow  = 15000
	torchPortHigh = 20000
)

// FreePort finds a port in the torch store's range that is free now on
// every address of this machine (the store listens on all of them): what
// rank 0 uses when Nomad gave its task no port (workerenv.TorchPort), and
// what a test gives a task in place of the port a client would.
func FreePort() (int, error) {
	return pickPort(func() int { return torchPortLow + rand.IntN(torchPortHigh-torchPortLow) })
}

// pickPort returns the first of up to 64 candidates that can be listened
// on.
func pickPort(candidate func() int) (int, error) {
	var err error
	for range 64 {
		port := candidate()
		var ln net.Listener
		if ln, err = net.Listen("tcp", ":"+strconv.Itoa(port)); err == nil {
			ln.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("find a free port for the torch store (64 tried): %w", err)
}

// Train runs the command for this generation: it agrees on the torchrun
// environment with its peers, starts the command with it, answers the
// command's requests until it exits, and stops it when ctx ends (the
// generation broke or the run stops).
func (r Runner) Train(ctx context.Context, s *trainer.Session) error {
	env, err := workerenv.Load(os.Getenv)
	if err != nil {
		return err
	}
	topo, err := topology(ctx, s, env)
	if err != nil {
		return err
	}
	helperDir, err := os.MkdirTemp("", "nomad-train-py-")
	if err != nil {
		return fmt.Errorf("make python helper dir: %w", err)
	}
	defer os.RemoveAll(helperDir)
	if err := os.WriteFile(filepath.Join(helperDir, python.HelperName), python.Helper(), 0o644); err != nil {
		return fmt.Errorf("write python helper: %w", err)
	}

	// Two pipes: requests from the command, replies to it.
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("make request pipe: %w", err)
	}
	defer reqR.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		reqW.Close()
		return fmt.Errorf("make reply pipe: %w", err)
	}
	defer repW.Close()

	cmd := exec.Command(r.Argv[0], r.Argv[1:]...)
	tail := newTailWriter(orStd(r.Stderr, os.Stderr), tailLines)
	cmd.Stdout, cmd.Stderr = orStd(r.Stdout, os.Stdout), tail
	// Wait copies stderr (for the tail) until every holder of the pipe
	// closes it: a child the command left behind must not hold it forever.
	cmd.WaitDelay = waitDelay
	cmd.ExtraFiles = []*os.File{reqW, repR} // fds 3 and 4
	latest := ""
	if ck := s.GetCheckpoint(); ck != nil {
		latest = ck.Path()
	}
	extra := append(workerenv.TorchEnv(topo),
		RequestFDEnv+"=3", ReplyFDEnv+"=4", LatestCheckpointEnv+"="+latest,
		"PYTHONPATH="+joinPath(helperDir, os.Getenv("PYTHONPATH")))
	if os.Getenv("OMP_NUM_THREADS") == "" {
		extra = append(extra, "OMP_NUM_THREADS=1") // torchrun's default
	}
	if cmd.Env, err = commandEnv(os.Environ(), extra...); err != nil {
		reqW.Close()
		repR.Close()
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	reqW.Close()
	repR.Close()
	if err != nil {
		return fmt.Errorf("%w: start %v: %w", ErrCommandFailed, r.Argv, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	reqs := make(chan Request)
	readErr := make(chan error, 1)
	readCtx, stopRead := context.WithCancel(ctx)
	defer stopRead()
	go readRequests(readCtx, reqR, reqs, readErr)

	enc := json.NewEncoder(repW)
	reportLost := false // a report failed because the gang broke
	for {
		select {
		case req := <-reqs:
			rep, lost := r.handle(ctx, s, req)
			reportLost = reportLost || lost
			if err := enc.Encode(rep); err != nil {
				s.Logger().Warn("reply to worker command", "error", err)
			}
		case err := <-readErr:
			// The command closed its end (it exited, or broke the
			// protocol): wait for its exit status.
			if err != nil {
				s.Logger().Warn("worker command protocol", "error", err)
			}
			readErr = nil
		case err := <-exited:
			if err != nil {
				return commandFailure(r.Argv, err, tail.Tail(), reportLost)
			}
			return nil
		case <-ctx.Done():
			r.stop(cmd, exited)
			return ctx.Err()
		}
	}
}

// waitDelay bounds how long Wait copies the command's output after it exits.
const waitDelay = 5 * time.Second

// handle answers one request, and says whether it failed because the gang
// broke (a collective of the runtime lost its peer).
func (r Runner) handle(ctx context.Context, s *trainer.Session, req Request) (Reply, bool) {
	switch req.Op {
	case "checkpoint_dir":
		dir, err := s.NewCheckpointDir()
		if err != nil {
			return Reply{Error: err.Error()}, false
		}
		return Reply{OK: true, Path: dir}, false
	case "report":
		var ck *trainer.Checkpoint
		if req.Checkpoint != "" {
			ck = trainer.CheckpointFromDirectory(req.Checkpoint)
		}
		if err := s.Report(ctx, trainer.Metrics(req.Metrics), ck); err != nil {
			return Reply{Error: err.Error()}, errors.Is(err, collective.ErrPeerLost) || ctx.Err() != nil
		}
		rep := Reply{OK: true}
		if ck != nil && s.GetCheckpoint() != nil {
			rep.Path = s.GetCheckpoint().Path()
		}
		return rep, false
	case "should_checkpoint":
		stop, err := s.ShouldCheckpoint(ctx)
		if err != nil {
			return Reply{Error: err.Error()}, errors.Is(err, collective.ErrPeerLost) || ctx.Err() != nil
		}
		return Reply{OK: true, Stop: stop}, false
	}
	return Reply{Error: fmt.Sprintf("unknown op %q (want report, checkpoint_dir or should_checkpoint)", req.Op)}, false
}

// maxRequestLine bounds one request line (metrics are small).
const maxRequestLine = 1 << 20

// readRequests decodes request lines until the pipe closes.
func readRequests(ctx context.Context, rd io.Reader, out chan<- Request, done chan<- error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), maxRequestLine)
	for sc.Scan() {
		req, err := DecodeRequest(sc.Bytes())
		if err != nil {
			done <- err
			return
		}
		select {
		case out <- req:
		case <-ctx.Done():
			done <- nil
			return
		}
	}
	done <- sc.Err()
}

// DecodeRequest decodes one request line; unknown fields are errors.
func DecodeRequest(line []byte) (Request, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return Request{}, fmt.Errorf("decode request %.100q: %w", line, err)
	}
	if req.Op == "" {
		return Request{}, fmt.Errorf("decode request %.100q: no op", line)
	}
	return req, nil
}

// stop ends the command's process group: SIGTERM, then SIGKILL after the
// grace period.
func (r Runner) stop(cmd *exec.Cmd, exited <-chan error) {
	pg := -cmd.Process.Pid
	syscall.Kill(pg, syscall.SIGTERM)
	grace := r.StopGrace
	if grace <= 0 {
		grace = 5 * time.Second
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		syscall.Kill(pg, syscall.SIGKILL)
		<-exited
	}
	syscall.Kill(pg, syscall.SIGKILL) // anything it left behind
}

func orStd(w io.Writer, def *os.File) io.Writer {
	if w == nil {
		return def
	}
	return w
}

func joinPath(dir, rest string) string {
	if rest == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + rest
}
