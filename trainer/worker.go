package trainer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

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

// watchStop turns the first SIGTERM or SIGINT into a stop request that the
// training function reads through ShouldCheckpoint, and cancels ctx (with
// ErrStopped) when a second signal comes or grace has passed, so a worker
// that ignores the request still ends.
func watchStop(ctx context.Context, cancel context.CancelCauseFunc, grace time.Duration, ev *eventLog) stopRequest {
	requested := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		defer signal.Stop(sigs)
		select {
		case sig := <-sigs:
			close(requested)
			ev.emit("stop_requested", fmt.Sprintf("%v: checkpoint and stop within %v", sig, grace), nil)
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-sigs:
		case <-t.C:
		case <-ctx.Done():
			return
		}
		cancel(ErrStopped)
	}()
	return stopRequest(requested)
}

// stopRequest is closed when the worker is asked to stop.
type stopRequest <-chan struct{}

// requested reports whether the stop was asked for (never, for a nil one:
// a nil channel never delivers).
func (r stopRequest) requested() bool {
	select {
	case <-r:
		return true
	default:
		return false
	}
}

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
	case errors.Is(err, ErrUnsharedStorage):
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
	w := &worker{env: env, fn: fn, ev: ev, log: log, store: store, secret: secret, stop: stop, hb: hb,
		attempt: storage.AttemptID(secret)}
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
		if cause := context.Cause(ctx); errors.Is(cause, ErrStopped) {
			return fmt.Errorf("%w: grace period over: %w", ErrStopped, err)
		}
		var lost *gangLost
		if !errors.As(err, &lost) || ctx.Err() != nil {
			return err
		}
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
	pub     *publisher // rank 0's progress, off the training loop's path
	// root is the storage root every rank shares, as rank 0 resolved it
	// (absolute), once a generation has restored; "" before.
	root string
}

// markFailed records that the run failed for good (see storage.FailedFile):
// restarting workers cannot help it.
func (w *worker) markFailed(err error, code int) {
	w.recordFailure(storage.Failure{Reason: err.Error(), ExitCode: code, Time: time.Now().UTC(), Attempt: w.attempt})
}

// failedKey is where the rendezvous store holds a run's failure for good,
// for workers that do not see the storage it is marked in: replacements in
// fresh allocation directories, a relative storage_path.
func failedKey(run string) string { return run + "/failed" }

// roots are the storage roots this worker marks and reads failures in: its
// own storage_path as it resolves it (where its driver looks before a
// restart) and the run directory's root that rank 0 reported (where every
// rank of a shared storage looks), when it differs.
func (w *worker) roots() []string {
	if w.root == "" || w.root == w.env.StoragePath {
		return []string{w.env.StoragePath}
	}
	return []string{w.env.StoragePath, w.root}
}

// recordFailure marks f in every root that has no mark of this attempt
// yet and in the rendezvous store unless a failure of this attempt is
// there already: the first reason stays. Marks of earlier attempts at a
// run of the same name are written over.
func (w *worker) recordFailure(f storage.Failure) {
	for _, root := range w.roots() {
		if _, marked, _ := storage.FailedForGood(root, w.env.RunName, w.attempt); marked {
			continue
		}
		if err := storage.MarkFailed(root, w.env.RunName, f); err != nil {
			w.log.Warn("cannot mark the run failed", "storage_path", root, "error", err)
		}
	}
	b, err := json.Marshal(f)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := failedKey(w.env.RunName)
	for range 3 { // a lost compare-and-set: look at the winner
		prev, _, mine, err := w.storedFailure(ctx)
		if err == nil && prev.Version > 0 && mine {
			return // this attempt's failure is recorded: the first reason stays
		}
		ok := false
		if err == nil {
			_, ok, err = w.store.CompareAndSet(ctx, key, b, prev.Version)
		}
		if err != nil {
			w.log.Warn("cannot record the run's failure in the rendezvous store", "error", err)
			return
		}
		if ok {
			return
		}
	}
}

// storedFailure reads the failure recorded in the rendezvous store and
// whether it is this attempt's (an unreadable one counts as this
// attempt's, so that it is reported).
func (w *worker) storedFailure(ctx context.Context) (v rendezvous.Value, f storage.Failure, mine bool, err error) {
	if v, err = w.store.Get(ctx, failedKey(w.env.RunName)); err != nil || v.Version == 0 {
		return v, f, false, err
	}
	if err := json.Unmarshal(v.Data, &f); err != nil {
		return v, storage.Failure{Reason: fmt.Sprintf("unreadable failure record: %v", err)}, true, nil
	}
	return v, f, f.Concerns(w.attempt), nil
}

// failedForGood returns the run's failure in this attempt when a storage
// root or the rendezvous store holds one.
func (w *worker) failedForGood(ctx context.Context) (storage.Failure, bool) {
	for _, root := range w.roots() {
		if f, marked, _ := storage.FailedForGood(root, w.env.RunName, w.attempt); marked {
			return f, true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, f, mine, err := w.storedFailure(ctx)
	if err != nil || !mine {
		return storage.Failure{}, false
	}
	return f, true
}

// attemptKey records the first generation of the latest attempt at the
// run. A run submitted again under the same name (a new secret: a new
// attempt) starts with its whole failure budget, though the store may
// keep the last gang's state, from whose generation the numbers go on.
func attemptKey(run string) string { return run + "/attempt" }

type attemptRecord struct {
	Attempt string `json:"attempt"`
	First   uint64 `json:"first_generation"`
}

// firstGeneration returns the first generation of this attempt at the
// run: the one recorded at attemptKey, or gen, which it records there in
// place of another attempt's record. When the store cannot tell, it is 1,
// and every generation counts, as if the store were fresh.
func (w *worker) firstGeneration(ctx context.Context, gen uint64) uint64 {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	key := attemptKey(w.env.RunName)
	mine, err := json.Marshal(attemptRecord{Attempt: w.attempt, First: gen})
	if err != nil {
		return 1
	}
	for range 3 { // a lost compare-and-set: another member of ours won
		v, err := w.store.Get(ctx, key)
		if err != nil {
			break
		}
		var rec attemptRecord
		if v.Version > 0 && json.Unmarshal(v.Data, &rec) == nil && rec.Attempt == w.attempt && rec.First <= gen {
			return rec.First
		}
		_, ok, err := w.store.CompareAndSet(ctx, key, mine, v.Version)
		if err != nil {
			break
		}
		if ok {
			return gen
		}
	}
	w.log.Debug("cannot tell this attempt's first generation; counting from 1")
	return 1
}

// publishProgress hands rank 0's latest report to the publisher, which
// puts it in the rendezvous store in the background (putProgress): the
// report is already committed to storage, and the store's round trips
// should not lengthen the training step.
func (w *worker) publishProgress(rec storage.Record) { w.pub.offer(rec) }

// putProgress puts a report at "<run>/progress" in the rendezvous store (on
// Nomad, under the job's Consul prefix:
// "nomad-train/<namespace>/<job>/<run>/progress"), where `nomad-train run`
// and `status` read it without reaching any worker. Best effort.
func (w *worker) putProgress(rec storage.Record) {
	line, err := storage.EncodeRecord(rec)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := w.env.RunName + "/progress"
	for range 3 { // a lost compare-and-set is only an older report of ours
		v, err := w.store.Get(ctx, key)
		if err != nil {
			w.log.Debug("publish progress", "error", err)
			return
		}
		if _, ok, err := w.store.CompareAndSet(ctx, key, line, v.Version); err != nil || ok {
			return
		}
	}
}

// publishEvery spaces rank 0's progress puts: on Consul each is a Raft
// write that wakes every member's watch of the run's keys, and the CLI
// that shows them polls no faster.
const publishEvery = time.Second

// publisher runs put on the latest offered record, one at a time and at
// most one per every, on its own goroutine: a record offered meanwhile
// replaces any record waiting, so a slow store or a fast training loop
// delays the display and never the caller. close puts what is waiting,
// then returns.
type publisher struct {
	put   func(storage.Record)
	every time.Duration
	mu    sync.Mutex
	next  *storage.Record
	wake  chan struct{}
	quit  chan struct{}
	done  chan struct{}
}

func newPublisher(put func(storage.Record), every time.Duration) *publisher {
	p := &publisher{put: put, every: every, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

// offer queues rec in place of any record not yet put; it never blocks.
func (p *publisher) offer(rec storage.Record) {
	p.mu.Lock()
	p.next = &rec
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// putWaiting puts the record waiting, if any.
func (p *publisher) putWaiting() {
	p.mu.Lock()
	r := p.next
	p.next = nil
	p.mu.Unlock()
	if r != nil {
		p.put(*r)
	}
}

func (p *publisher) loop() {
	defer close(p.done)
	var last time.Time // when the last put began
	for {
		select {
		case <-p.wake:
		case <-p.quit:
			p.putWaiting()
			return
		}
		if d := p.every - time.Since(last); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-p.quit:
				t.Stop()
				p.putWaiting()
				return
			}
		}
		last = time.Now()
		p.putWaiting()
	}
}

// close puts the record still waiting, if any, and stops the goroutine.
func (p *publisher) close() {
	close(p.quit)
	<-p.done
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
	waited := w.hb.Waiting(fmt.Sprintf("waiting for the gang (%d workers)", env.WorldSize))
	rdzv, err := rendezvous.Join(jctx, w.store, env.RunName, rendezvous.Member{
		ID: env.MemberID, Node: env.Node, Addr: ln.Addr().String(), RankHint: env.RankHint,
	}, env.WorldSize, rendezvous.Options{Timeout: env.RendezvousTimeout, LeaseTTL: env.LeaseTTL, Logger: w.log})
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
	if used := w.failuresUsed(ctx, a.Generation); env.MaxFailures >= 0 && used > env.MaxFailures {
		w.ev.emit("failure_budget_used", fmt.Sprintf("%d failures, budget %d", used, env.MaxFailures), nil)
		err := fmt.Errorf("%w: the gang failed %d times, max_failures is %d", ErrBudgetExhausted, used, env.MaxFailures)
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
	go func() {
		defer watchers.Done()
		if ev, ok := <-rdzv.WatchLoss(wctx); ok {
			cancel(&gangLost{generation: a.Generation, cause: ev.String()})
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

	s := &Session{
		rank: a.Rank, size: a.WorldSize, localRank: a.LocalRank, localSize: a.LocalWorldSize,
		nodeRank: a.NodeRank, generation: a.Generation, config: env.Config,
		group:  group,
		events: w.ev, log: log, now: time.Now, stop: w.stop, wd: wd, hb: w.hb, publish: w.publishProgress,
	}
	err = s.restore(gctx, env)
	// Rank 0 opened the storage (its writer lock) before the gang shared
	// the resume point: a gang that breaks there must not leave it locked
	// for this process's next generation.
	if s.store != nil {
		defer s.store.Close()
	}
	if s.runDir != "" {
		w.root = filepath.Dir(s.runDir)
	}
	if err != nil {
		err = lostOr(err)
		if errors.Is(err, ErrUnsharedStorage) {
			// No restart can fix where storage_path points: every rank
			// marks the run failed in the storage it sees.
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

// resumePoint is what rank 0 tells the others at start-up.
type resumePoint struct {
	Step       int64  `json:"step"`
	Checkpoint string `json:"checkpoint,omitempty"`
	// RunDir is the run directory as an absolute path; every rank builds
	// its checkpoints under it, so it must be the same directory for all.
	RunDir string `json:"run_dir,omitempty"`
	// Probe is the content of probeFile, which rank 0 wrote under RunDir
	// for the others to read back (empty in a gang of one).
	Probe string `json:"probe,omitempty"`
	Err   string `json:"err,omitempty"`
}

// probeFile is written by rank 0 in the run's scratch directory at start-up;
// a rank that cannot read it back does not share rank 0's storage.
const probeFile = "shared-probe"

// readProbe reads the probe as rank sees the file system; tests replace it
// to give a rank another node's view.
var readProbe = func(rank int, path string) ([]byte, error) { return os.ReadFile(path) }

// ErrUnsharedStorage is returned when a rank cannot see the run directory
// rank 0 opened: storage_path is not one directory shared by every worker,
// so checkpoints could be neither assembled nor restored.
var ErrUnsharedStorage = errors.New("storage_path is not shared between workers")

// restore opens storage on rank 0, finds where the run left off, and tells
// every rank; each other rank checks it sees the same run directory.
func (s *Session) restore(ctx context.Context, env workerenv.Env) error {
	var rp resumePoint
	if s.rank == 0 {
		rp = s.openStorage(ctx, env)
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
	if rp.Probe != "" {
		if err := s.checkShared(ctx, env, rp); err != nil {
			return err
		}
	}
	s.runDir = rp.RunDir
	s.step, s.resumed = rp.Step, true
	if rp.Checkpoint != "" {
		s.latest = CheckpointFromDirectory(rp.Checkpoint)
	}
	s.beat()
	return nil
}

// checkShared has every rank other than 0 read back rank 0's probe, and
// all ranks learn the first rank that could not, so the whole gang fails
// with the same clear error rather than at the first checkpoint or restore.
func (s *Session) checkShared(ctx context.Context, env workerenv.Env, rp resumePoint) error {
	path := filepath.Join(rp.RunDir, scratchDir, probeFile)
	var mine string
	if s.rank != 0 {
		if b, err := readProbe(s.rank, path); err != nil || string(b) != rp.Probe {
			mine = fmt.Sprintf("rank %d cannot read %s, which rank 0 wrote", s.rank, path)
		}
	}
	all, err := s.gatherJSON(ctx, mine)
	if err != nil {
		return fmt.Errorf("check shared storage: %w", err)
	}
	for _, raw := range all {
		var msg string
		if err := json.Unmarshal(raw, &msg); err != nil {
			return fmt.Errorf("check shared storage: %w", err)
		}
		if msg != "" && storage.IsObjectPath(env.StoragePath) {
			// Rank 0 gathers every rank's files in its local directory
			// before the upload: not yet across machines.
			return fmt.Errorf("%w: %s (storage_path %q is on S3, but the ranks' checkpoint files are still gathered on rank 0's machine: run the gang on one machine)",
				ErrUnsharedStorage, msg, env.StoragePath)
		}
		if msg != "" {
			return fmt.Errorf("%w: %s (storage_path %q; every worker must see the same directory at the same path, such as an NFS, host or CSI volume mounted on every node)",
				ErrUnsharedStorage, msg, env.StoragePath)
		}
	}
	return nil
}

func (s *Session) openStorage(ctx context.Context, env workerenv.Env) resumePoint {
	policy := storagePolicy(env.Checkpoint)
	if env.FsyncCheckpointsOnly {
		policy.Fsync = storage.FsyncCheckpointRecords
	}
	// On an object store the run directory is a local one, where
	// checkpoints are built and restored: the ranks of a gang must share
	// it, which the probe checks.
	st, err := storage.OpenStore(ctx, env.StoragePath, env.RunName, policy, storage.WithLogger(s.log))
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	s.store = st
	// Checkpoints half-built by an earlier attempt are garbage now.
	scratch := filepath.Join(st.LocalDir(), scratchDir)
	os.RemoveAll(scratch)
	runDir, err := filepath.Abs(st.LocalDir())
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	probe := ""
	if s.size > 1 {
		if probe, err = writeProbe(scratch); err != nil {
			return resumePoint{Err: err.Error()}
		}
	}
	recs, err := st.Records()
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	latest, err := st.LatestIntact()
	if err != nil {
		return resumePoint{Err: err.Error()}
	}
	s.reportRestore(latest)
	name, ok := latest.Name, latest.OK
	// Training restarts from the latest checkpoint (or from scratch), so
	// reports made after it are rolled back: the history then reads as if
	// the run had never failed.
	rp := resumePoint{RunDir: runDir, Probe: probe}
	if ok {
		if rp.Checkpoint, err = filepath.Abs(latest.Path); err != nil {
			return resumePoint{Err: err.Error()}
		}
		for _, r := range recs {
			if r.Checkpoint == name {
				rp.Step = r.Step
			}
		}
	}
	if err := st.TruncateAfter(rp.Step); err != nil {
		return resumePoint{Err: err.Error()}
	}
	return rp
}

// writeProbe writes a random token to probeFile in dir and returns it.
func writeProbe(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("make checkpoint scratch dir: %w", err)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b[:])
	if err := os.WriteFile(filepath.Join(dir, probeFile), []byte(token), 0o644); err != nil {
		return "", fmt.Errorf("write storage probe: %w", err)
	}
	return token, nil
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
