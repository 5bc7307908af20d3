package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/trainer/collective"
	"github.com/nomad-train/nomad-train/trainer/internal/auth"
	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Exit codes of a worker process (see package workerenv).
const (
	ExitOK         = workerenv.ExitOK
	ExitUserError  = workerenv.ExitUserError
	ExitBadEnv     = workerenv.ExitBadEnv
	ExitInfraError = workerenv.ExitInfraError
	ExitPeerLost   = workerenv.ExitPeerLost
)

// ErrUser marks a failure of the training function itself.
var ErrUser = errors.New("training function failed")

// RunWorker runs fn as one worker of the gang described by the environment
// (see package workerenv) and returns the process exit code. Fit calls it in
// worker processes; binaries that carry built-in training functions call it
// directly.
func RunWorker(ctx context.Context, fn TrainFunc) int {
	log := hclog.New(&hclog.LoggerOptions{
		Name:   "worker",
		Output: os.Stderr,
		Level:  hclog.LevelFromString(envOr("NOMAD_TRAIN_LOG_LEVEL", "warn")),
	})
	env, err := workerenv.Load(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nomad-train worker: %v\n", err)
		return ExitBadEnv
	}
	ev := openEventLog(env.Events)
	defer ev.close()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	err = runWorker(ctx, env, fn, ev, log)
	if err == nil {
		ev.emit("worker_finished", "training function returned", nil)
		return ExitOK
	}
	code := ExitInfraError
	switch {
	case errors.Is(err, ErrUser):
		code = ExitUserError
	case errors.Is(err, collective.ErrPeerLost):
		code = ExitPeerLost
	}
	ev.emit("worker_failed", err.Error(), map[string]string{"exit_code": fmt.Sprint(code)})
	fmt.Fprintf(os.Stderr, "nomad-train worker: %v\n", err)
	return code
}

func runWorker(ctx context.Context, env workerenv.Env, fn TrainFunc, ev *eventLog, log hclog.Logger) error {
	secret, err := auth.ReadSecretFile(env.SecretFile)
	if err != nil {
		return err
	}
	store, err := rendezvous.Open(ctx, env.Rendezvous, secret, log)
	if err != nil {
		return fmt.Errorf("open rendezvous store: %w", err)
	}
	defer store.Close()

	ln, err := net.Listen("tcp", env.Addr)
	if err != nil {
		return fmt.Errorf("listen for collectives on %s: %w", env.Addr, err)
	}
	defer ln.Close()

	rdzv, err := rendezvous.Join(ctx, store, env.RunName, rendezvous.Member{
		ID: env.MemberID, Node: env.Node, Addr: ln.Addr().String(), RankHint: env.RankHint,
	}, env.WorldSize, rendezvous.Options{Timeout: env.RendezvousTimeout, Logger: log})
	if err != nil {
		return fmt.Errorf("rendezvous: %w", err)
	}
	defer rdzv.Leave(context.Background())
	a := rdzv.Assignment()
	log = log.With("rank", a.Rank, "gen", a.Generation)
	ev.emit("rendezvous_complete", fmt.Sprintf("rank %d of %d, generation %d", a.Rank, a.WorldSize, a.Generation),
		map[string]string{"rank": fmt.Sprint(a.Rank), "world_size": fmt.Sprint(a.WorldSize), "generation": fmt.Sprint(a.Generation)})

	peers := make([]string, len(a.Peers))
	for i, p := range a.Peers {
		peers[i] = p.Addr
	}
	group, err := collective.New(ctx, collective.Config{
		Rank: a.Rank, Size: a.WorldSize, Listener: ln, Peers: peers,
		Timeout: env.CollectiveTimeout, Secret: secret, Generation: a.Generation,
		Logger: log.Named("collective"),
	})
	if err != nil {
		return fmt.Errorf("connect collectives: %w", err)
	}
	defer group.Close()

	s := &Session{
		rank: a.Rank, size: a.WorldSize, localRank: a.LocalRank, localSize: a.LocalWorldSize,
		nodeRank: a.NodeRank, generation: a.Generation, config: env.Config,
		runDir: filepath.Join(env.StoragePath, env.RunName), group: group,
		events: ev, log: log, now: time.Now,
	}
	if err := s.restore(ctx, env); err != nil {
		return err
	}
	if s.store != nil {
		defer s.store.Close()
	}
	if err := callTrain(ctx, fn, s); err != nil {
		return err
	}
	// Every rank leaves together, so none closes its sockets while a peer
	// still needs them.
	if err := group.Barrier(ctx); err != nil {
		return fmt.Errorf("final barrier: %w", err)
	}
	return nil
}

// resumePoint is what rank 0 tells the others at start-up.
type resumePoint struct {
	Step       int64  `json:"step"`
	Checkpoint string `json:"checkpoint,omitempty"`
	Err        string `json:"err,omitempty"`
}

// restore opens storage on rank 0, finds where the run left off, and tells
// every rank.
func (s *Session) restore(ctx context.Context, env workerenv.Env) error {
	var rp resumePoint
	if s.rank == 0 {
		rp = s.openStorage(env)
	}
	all, err := s.gatherJSON(ctx, rp)
	if err != nil {
		return fmt.Errorf("share resume point: %w", err)
	}
	if err := json.Unmarshal(all[0], &rp); err != nil {
		return fmt.Errorf("decode resume point: %w", err)
	}
	if rp.Err != "" {
		return fmt.Errorf("open run storage: %s", rp.Err)
	}
	s.step = rp.Step
	if rp.Checkpoint != "" {
		s.latest = CheckpointFromDirectory(rp.Checkpoint)
	}
	return nil
}

func (s *Session) openStorage(env workerenv.Env) resumePoint {
	st, err := storage.Open(env.StoragePath, env.RunName, storagePolicy(env.Checkpoint))
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	s.store = st
	// Checkpoints half-built by an earlier attempt are garbage now.
	os.RemoveAll(filepath.Join(st.Dir(), scratchDir))
	recs, err := st.Records()
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	var rp resumePoint
	if len(recs) > 0 {
		rp.Step = recs[len(recs)-1].Step
	}
	_, path, ok, err := st.Latest()
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	if ok {
		rp.Checkpoint = path
	}
	return rp
}

// callTrain runs the training function, turning a panic into an error.
func callTrain(ctx context.Context, fn TrainFunc, s *Session) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: panic: %v\n%s", ErrUser, p, debug.Stack())
		}
	}()
	if err := fn(ctx, s); err != nil {
		// A broken gang or a stop surfaces through the user's code, but is
		// not the user's fault.
		if errors.Is(err, collective.ErrPeerLost) || errors.Is(err, ErrReport) || ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUser, err)
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
