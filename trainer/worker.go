package trainer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-train/nomad-train/internal/english"
	"github.com/nomad-train/nomad-train/trainer/collective"
	"github.com/nomad-train/nomad-train/trainer/internal/auth"
	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/storeuri"
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

	ExitBudgetExhausted = workerenv.ExitBudgetExhausted
	ExitStopped         = workerenv.ExitStopped
)

// ErrStopped is returned when the worker was asked to stop (SIGTERM, as
// Nomad sends on stop and drain): the training function saw
// ShouldCheckpoint, checkpointed and returned, or the grace period ran out.
var ErrStopped = errors.New("stopped")

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
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := watchStop(ctx, cancel, env.StopGrace, ev)

	err = runWorker(ctx, env, fn, ev, log, stop)
	if err == nil {
		ev.emit("worker_finished", "training function returned", nil)
		return ExitOK
	}
	code := ExitInfraError
	switch {
	case errors.Is(err, ErrUser):
		code = ExitUserError
	case errors.Is(err, ErrUnsharedStorage), errors.Is(err, ErrStartCheckpoint):
		code = ExitBadEnv
	case errors.Is(err, ErrBudgetExhausted):
		code = ExitBudgetExhausted
	case errors.Is(err, ErrStopped):
		code = ExitStopped
	case errors.Is(err, collective.ErrPeerLost):
		code = ExitPeerLost
	}
	ev.emit("worker_failed", err.Error(), map[string]string{"exit_code": fmt.Sprint(code)})
	fmt.Fprintf(os.Stderr, "nomad-train worker: %v\n", err)
	return code
}

// runWorker trains until the training function returns on every rank. When
// the gang loses a member, this worker does not exit: it leaves the broken
// generation, joins the next one (with the lost worker's replacement),
// restores the latest checkpoint and calls the training function again, as
// long as the failure budget allows.
func runWorker(ctx context.Context, env workerenv.Env, fn TrainFunc, ev *eventLog, log hclog.Logger, stop stopRequest) error {
	secret, err := auth.ReadSecretFile(env.SecretFile)
	if err != nil {
		return err
	}
	store, err := storeuri.Open(ctx, env.Rendezvous, secret, log)
	if err != nil {
		return fmt.Errorf("open rendezvous store: %w", err)
	}
	defer store.Close()
	// On Consul each worker is a service with a TTL check fed by its
	// progress, so a hung worker turns critical though its process lives.
	host, port := splitHostPort(env.Addr)
	hb, err := storeuri.RegisterHealth(ctx, env.Rendezvous, storeuri.HealthSpec{
		Service: "nomad-train", ID: env.RunName + "-" + env.MemberID, Addr: host, Port: port,
		TTL: max(env.StallFloor, time.Minute), Tags: []string{env.RunName},
		Meta: map[string]string{"run": env.RunName, "member": env.MemberID},
	}, log)
	if err != nil {
		return fmt.Errorf("register health check: %w", err)
	}
	defer hb.Close(context.Background())
	metrics, metricsSrv := startMetrics(env, ev, log)
	defer metricsSrv.close()
	w := &worker{env: env, fn: fn, ev: ev, log: log, store: store, secret: secret, stop: stop, hb: hb,
		attempt: storage.AttemptID(secret), metrics: metrics}
	w.pub = newPublisher(w.putProgress, publishEvery)
	defer w.pub.close()
	// A replacement for a worker of a run that failed for good (Nomad
	// reschedules into a fresh directory) does not wait in rendezvous for
	// a gang that will never form: it marks its own storage, so its driver
	// refuses the next restart, and exits.
	if f, failed := w.failedForGood(ctx); failed {
		w.recordFailure(f)
		return fmt.Errorf("%w: the run failed for good: %s", collective.ErrPeerLost, f.Reason)
	}
	for {
		err := w.generation(ctx)
		if errors.Is(err, rendezvous.ErrGangFinished) {
			// An elastic gang finished while this worker waited to join.
			log.Info("the gang finished without this worker", "cause", err)
			return nil
		}
		if cause := context.Cause(ctx); errors.Is(cause, ErrStopped) {
			return fmt.Errorf("%w: grace period over: %w", ErrStopped, err)
		}
		var lost *gangLost
		if !errors.As(err, &lost) || ctx.Err() != nil {
			return err
		}
		w.lost = lost.missing
		if stop.requested() {
			return fmt.Errorf("%w while the gang was broken: %w", ErrStopped, err)
		}
		// A peer that failed for good (its training function failed, or
		// the budget is spent) will not come back: do not wait for it.
		if f, failed := w.failedForGood(ctx); failed {
			w.recordFailure(f)
			return fmt.Errorf("%w: the run failed for good: %s", collective.ErrPeerLost, f.Reason)
		}
		if lost.stopped {
			log.Info("some workers stopped; joining the next generation", "cause", lost.Error())
		} else {
			log.Warn("gang lost a member; joining the next generation", "cause", lost.Error())
		}
		ev.emit("generation_changed", lost.Error(), map[string]string{"generation": fmt.Sprint(lost.generation)})
	}
}

// worker is what stays the same across generations in one worker process.
type worker struct {
	env     workerenv.Env
	fn      TrainFunc
	ev      *eventLog
	log     hclog.Logger
	store   rendezvous.Store
	secret  []byte
	attempt string      // storage.AttemptID(secret): this attempt at the run
	stop    stopRequest // the first SIGTERM/SIGINT (see watchStop)
	hb      heartbeat
	pub     *publisher     // rank 0's progress, off the training loop's path
	metrics *workerMetrics // nil when the worker serves no metrics
	// root is the storage root every rank shares, as rank 0 resolved it
	// (absolute), once a generation has restored; "" before.
	root string
	// first is this attempt's first generation (see firstGeneration),
	// once a generation has joined; 0 before.
	first uint64
	// lost names the members the last generation lost, as far as known.
	lost []string
}

// heartbeat is the worker's health check (storeuri.Heartbeat): steps keep
// it passing, and so does a wait that is bounded on its own.
type heartbeat interface {
	Beat(step int64)
	Waiting(reason string) (done func())
}

func splitHostPort(addr string) (string, int) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	port, _ := strconv.Atoi(p)
	return host, port
}

// gangLost says the generation broke because of something outside this
// worker: a lost member, or a collective that failed with its peer; or,
// when stopped, that it ended in a stop of other members (see stop.go).
type gangLost struct {
	generation uint64
	cause      string
	stopped    bool
	missing    []string // the members seen lost, when known
}

func (g *gangLost) Error() string {
	if g.stopped {
		return fmt.Sprintf("generation %d ended: %s", g.generation, g.cause)
	}
	return fmt.Sprintf("generation %d lost: %s", g.generation, g.cause)
}

// ErrBudgetExhausted is returned when the gang has failed more often than
// its failure budget (max_failures) allows.
var ErrBudgetExhausted = errors.New("failure budget exhausted")

// generation runs one rendezvous generation: join, connect, restore, train.
func (w *worker) generation(ctx context.Context) error {
	env := w.env
	ln, err := net.Listen("tcp", env.Addr)
	if err != nil {
		return fmt.Errorf("listen for collectives on %s: %w", env.Addr, err)
	}
	defer ln.Close()

	// Between trainings there is nothing to checkpoint: a stop request
	// ends a wait for the gang at once.
	jctx, stopJoin := context.WithCancel(ctx)
	go func() {
		select {
		case <-w.stop:
			stopJoin()
		case <-jctx.Done():
		}
	}()
	// Waiting for the gang takes no steps; it is healthy for as long as
	// the rendezvous timeout allows, which is longer than the check's TTL.
	size := gangSize(env)
	waited := w.hb.Waiting(fmt.Sprintf("waiting for the gang (%v workers)", size))
	rdzv, err := rendezvous.Join(jctx, w.store, env.RunName, rendezvous.Member{
		ID: env.MemberID, Node: env.Node, Addr: ln.Addr().String(), RankHint: env.RankHint,
	}, size, rendezvous.Options{Timeout: env.RendezvousTimeout, LeaseTTL: env.LeaseTTL, Logger: w.log,
		OutageGrace: env.ConsulOutageGrace, Restore: w.restoreKeys, Settle: env.Settle, Lost: w.lost})
	waited()
	stopJoin()
	if err != nil {
		if w.stop.requested() {
			return fmt.Errorf("%w while waiting for the gang: %w", ErrStopped, err)
		}
		return fmt.Errorf("rendezvous: %w", err)
	}
	defer rdzv.Leave(context.Background())
	a := rdzv.Assignment()
	log := w.log.With("rank", a.Rank, "gen", a.Generation)
	// Every generation after this attempt's first is one gang failure,
	// except one that followed an agreed stop (see stop.go).
	w.first = w.firstGeneration(ctx, a.Generation)
	used := w.failuresUsed(ctx, w.first, a.Generation)
	w.metrics.join(a.Rank, a.Generation, used)
	if workerenv.BudgetExhausted(used, env.MaxFailures) {
		w.ev.emit("failure_budget_used", fmt.Sprintf("%d failures, budget %d", used, env.MaxFailures), nil)
		err := fmt.Errorf("%w: the gang failed %s, max_failures is %d", ErrBudgetExhausted, english.Count(used, "time", "times"), env.MaxFailures)
		w.markFailed(err, ExitBudgetExhausted)
		return err
	} else if used > 0 {
		w.ev.emit("failure_budget_used", fmt.Sprintf("failure %d of %s", used, budgetString(env.MaxFailures)),
			map[string]string{"used": fmt.Sprint(used), "max_failures": fmt.Sprint(env.MaxFailures)})
	}
	w.ev.emit("rendezvous_complete", fmt.Sprintf("rank %d of %d, generation %d", a.Rank, a.WorldSize, a.Generation),
		map[string]string{"rank": fmt.Sprint(a.Rank), "world_size": fmt.Sprint(a.WorldSize), "generation": fmt.Sprint(a.Generation)})

	// When the generation breaks, everything the training function waits
	// on is cancelled, so it returns at once instead of at a deadline.
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wctx, stopWatch := context.WithCancel(gctx)
	var watchers sync.WaitGroup
	watchers.Add(2)
	grow := &growth{end: func() error { return w.endToGrow(gctx, a, cancel) }}
	go func() {
		defer watchers.Done()
		if ev, ok := <-rdzv.WatchLoss(wctx); ok {
			if w.mayGrow(wctx, a, ev) {
				// A loss from here on breaks the ring's collectives.
				log.Info("a worker is waiting to join; growing at the next checkpoint", "event", ev.String())
				grow.pending.Store(true)
				return
			}
			cancel(&gangLost{generation: a.Generation, cause: ev.String(), missing: ev.Missing})
		}
	}()
	wd := newWatchdog(env.StallFloor, env.StallFactor, time.Now())
	go func() {
		defer watchers.Done()
		if cause, hung := watchStall(wctx, wd, env.StallFloor); hung {
			w.ev.emit("hang_detected", cause, nil)
			cancel(&gangLost{generation: a.Generation, cause: cause})
		}
	}()
	defer func() { stopWatch(); watchers.Wait() }()
	lostOr := func(err error) error {
		if cause := context.Cause(gctx); cause != nil && ctx.Err() == nil {
			var lost *gangLost
			if errors.As(cause, &lost) {
				return lost
			}
		}
		if errors.Is(err, collective.ErrPeerLost) && ctx.Err() == nil {
			if lost := w.whoWasLost(gctx); lost != nil {
				return lost
			}
			return &gangLost{generation: a.Generation, cause: err.Error()}
		}
		return err
	}

	peers := make([]string, len(a.Peers))
	for i, p := range a.Peers {
		peers[i] = p.Addr
	}
	group, err := collective.New(gctx, collective.Config{
		Rank: a.Rank, Size: a.WorldSize, Listener: ln, Peers: peers,
		Timeout: env.CollectiveTimeout, Transport: transportOf(env), Secret: w.secret,
		Generation: a.Generation, Logger: log,
	})
	if err != nil {
		return lostOr(fmt.Errorf("connect collectives: %w", err))
	}
	defer group.Close()

	// The storage outlives a broken generation for a while: what this rank
	// had under way (its upload of a checkpoint, rank 0's commit of it)
	// finishes in closeStorage, so that the next generation resumes from
	// that checkpoint rather than from the one before. It ends with this
	// process's own context, at once.
	sctx, cancelStorage := context.WithCancel(ctx)
	defer cancelStorage()
	defer context.AfterFunc(gctx, func() { time.AfterFunc(brokenGenerationWrites, cancelStorage) })()

	s := &Session{
		rank: a.Rank, size: a.WorldSize, localRank: a.LocalRank, localSize: a.LocalWorldSize,
		nodeRank: a.NodeRank, generation: a.Generation, attempt: w.attempt, config: env.Config, run: env.RunName,
		group: group, storageCtx: sctx,
		events: w.ev, log: log, now: time.Now, stop: w.stop, wd: wd, hb: w.hb, publish: w.publishProgress,
		metrics: w.metrics, grow: grow,
	}
	err = s.restore(gctx, env)
	// Rank 0 opened the storage (its writer lock) before the gang shared
	// the resume point: a gang that breaks there must not leave it locked
	// for this process's next generation.
	defer s.closeStorage()
	if s.runDir != "" {
		w.root = filepath.Dir(s.runDir)
	}
	if err != nil {
		err = lostOr(err)
		if errors.Is(err, ErrUnsharedStorage) || errors.Is(err, ErrStartCheckpoint) {
			// No restart can fix where storage_path or resume_from
			// points: every rank marks the run failed in the storage it
			// sees.
			w.markFailed(err, ExitBadEnv)
		}
		return err
	}
	if err := callTrain(gctx, w.fn, s); err != nil {
		err = lostOr(err)
		if errors.Is(err, ErrUser) {
			// Before this worker's sockets close, so that peers who see
			// it go also see why.
			w.markFailed(err, ExitUserError)
		}
		return err
	}
	if err := s.settle(gctx); err != nil {
		return lostOr(err)
	}
	// Every rank leaves together, so none closes its sockets or leaves the
	// rendezvous while a peer still needs it. The barrier is kept in the
	// store, not on the ring: a rank that is through may go at once without
	// its departure looking like a loss to one still finishing.
	stopWatch()
	watchers.Wait()
	if s.stopAgreed {
		w.recordStop(gctx, a, s.leaving) // before Finish: every member sees it after
	}
	if err := rdzv.Finish(gctx); err != nil {
		var lost *rendezvous.LostError
		if errors.As(err, &lost) && ctx.Err() == nil {
			return &gangLost{generation: a.Generation, cause: lost.Event.String()}
		}
		return fmt.Errorf("finish: %w", err)
	}
	if s.stopAgreed {
		return w.afterStop(a, s.leaving)
	}
	return nil
}

// watchStall polls the watchdog until ctx ends or the gang has made no
// progress for too long, and then says why.
func watchStall(ctx context.Context, wd *watchdog, floor time.Duration) (string, bool) {
	t := time.NewTicker(min(max(floor/4, 50*time.Millisecond), 5*time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", false
		case now := <-t.C:
			if since, limit, hung := wd.stalled(now); hung {
				return fmt.Sprintf("no collective completed for %v (limit %v): a peer is hung", since.Round(time.Millisecond), limit.Round(time.Millisecond)), true
			}
		}
	}
}

func budgetString(max int) string {
	if max < 0 {
		return "unlimited"
	}
	return fmt.Sprint(max)
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

// transportOf is the collective transport the worker's environment asks for.
func transportOf(env workerenv.Env) collective.Transport {
	if env.CollectiveTCPOnly {
		return collective.TransportTCP
	}
	return collective.TransportAuto
}
